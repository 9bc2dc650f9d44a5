"""A gate on the best *sentence*, against the shipped gate on the best chunk. For every question
of the human-written Wikipedia sets, the generated description questions (answers-en) and the
red-team business sets (their legitimate questions and benchmarks/eval/business-unanswerable
.jsonl), the judge's scores as the query path reads them: each of the 20 candidates whole
(the shipped gate takes the best), and each sentence of the best-judged candidates, alone and
after its heading path. No generator. Raw scores go to --out (JSON lines); the tables are
computed from them (``--analyse`` reads a previous --out without the judge).

    .venv/bin/python -m benchmarks.experiments.sentence_gate \
        --out benchmarks/eval/sentence-gate.jsonl
    .venv/bin/python -m benchmarks.experiments.sentence_gate \
        --analyse benchmarks/eval/sentence-gate.jsonl

Thresholds are chosen per language on the development questions (judge_gate.py's rule: the
most unanswerable turned away with at most --max-false of the answerable) and reported on the
held-out ones: the test halves of the Wikipedia sets and the two held-out red-team sets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.answer_check import raw_scores
from benchmarks.build_eval import HERE
from benchmarks.judge_gate import choose, rates
from benchmarks.redteam.sets import unanswerable
from benchmarks.retrieval_quality import CACHE
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch
from serve.eval.run import load_questions
from serve.query.citations import sentence_spans
from serve.query.judging import RerankConfig
from serve.query.language import detect_language
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.rerankers import OnnxCrossEncoderReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]

TOP = 3  # candidates whose sentences are judged
RED_TEAM = ("redteam", "redteam-heldout", "redteam-heldout2")


def sentences(text: str) -> list[str]:
    """The sentences of a passage worth judging (two words or more)."""
    pieces = (text[a:b].strip() for a, b in sentence_spans(text))
    return [p for p in pieces if len(p.split()) >= 2]


async def judged(pipeline, judge, tenant: str, question: str, candidates: int) -> dict:
    options = QueryOptions(top_k=candidates, gate=False)
    hits = await pipeline.retrieve(tenant, question, options)
    chunks = await judge.scores(question, [h.text for h in hits]) if hits else []
    best = sorted(range(len(hits)), key=lambda i: -chunks[i])[:TOP]
    plain, titled = [], []
    for i in best:
        hit, parts = hits[i], sentences(hits[i].text)
        path = " > ".join(hit.heading_path)
        plain.append(await judge.scores(question, parts) if parts else [])
        titled.append(
            await judge.scores(question, [f"{path}: {p}" if path else p for p in parts])
            if parts
            else []
        )
    return {"chunks": chunks, "sentences": plain, "titled": titled}


async def collect(args) -> list[dict]:
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    rerank = config.query.rerank
    judge = OnnxCrossEncoderReranker(
        str(fetch("ms-marco-minilm-l12", ROOT / "data")),
        "cpu",
        max_tokens=rerank.max_tokens,
        window=rerank.window,
    ).start()
    query = config.query.model_copy(update={"rerank": RerankConfig()})  # as retrieved
    rows = []
    service = IndexService(config.index, config.data_dir).start()
    pipeline = QueryPipeline(LocalSearcher(service), None, query)
    for name, tenant in (
        ("human-en", "wiki-en"),
        ("human-fr", "wiki-fr"),
        ("answers-en", "wiki-en"),
    ):
        for q in load_questions(HERE / f"{name}.jsonl"):
            scores = await judged(pipeline, judge, tenant, q.question, rerank.candidates)
            rows.append(
                {
                    "set": name,
                    "id": q.id,
                    "split": q.split,
                    "answerable": q.answerable,
                    "language": detect_language(q.question),
                    **scores,
                }
            )
        print(f"{name}: done", file=sys.stderr, flush=True)
    service.close()
    with tempfile.TemporaryDirectory() as data_dir:  # a tenant per red-team set
        service = IndexService(config.index, Path(data_dir)).start()
        pipeline = QueryPipeline(LocalSearcher(service), None, query)
        for name in RED_TEAM:
            folder = ROOT / "benchmarks" / name
            list(service.pipeline(name).ingest(discover([folder / "docs"])[0]))
            cases = [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]
            questions = [(c["id"], c["question"], True) for c in cases]
            questions += [
                (q["id"], q["question"], False) for q in unanswerable() if q["set"] == name
            ]
            for qid, question, answerable in questions:
                scores = await judged(pipeline, judge, name, question, rerank.candidates)
                rows.append(
                    {
                        "set": name,
                        "id": qid,
                        "answerable": answerable,
                        "split": "dev" if name == "redteam" else "test",
                        "language": detect_language(question),
                        **scores,
                    }
                )
            print(f"{name}: done", file=sys.stderr, flush=True)
        service.close()
    return rows


def best(values: list[list[float]], top: int) -> float:
    return max((s for group in values[:top] for s in group), default=-99.0)


SIGNALS = {
    "chunk (shipped)": lambda r: max(r["chunks"], default=-99.0),
    "sentence, best candidate": lambda r: best(r["sentences"], 1),
    "sentence, top 3": lambda r: best(r["sentences"], 3),
    "path + sentence, top 3": lambda r: best(r["titled"], 3),
    "mean of chunk and sentence": lambda r: (
        (max(r["chunks"], default=-99.0) + best(r["sentences"], 3)) / 2
    ),
}


def analyse(rows: list[dict], max_false: float, shipped: dict[str, float]) -> None:
    print(
        "| language | signal | threshold (dev) | set | answerable turned away | "
        "unanswerable turned away |\n|---|---|---|---|---|---|"
    )
    for language in ("en", "fr"):
        mine = [r for r in rows if r["language"] == language]
        for signal, value in SIGNALS.items():
            dev = [(value(r), r["answerable"]) for r in mine if r["split"] == "dev"]
            threshold = choose(dev, max_false)
            if signal == "chunk (shipped)" and language in shipped:
                threshold = shipped[language]
            for name in dict.fromkeys(r["set"] for r in mine):
                for split in ("dev", "test"):
                    xs = [
                        (value(r), r["answerable"])
                        for r in mine
                        if r["set"] == name and r["split"] == split
                    ]
                    if not any(a for _, a in xs) or all(a for _, a in xs):
                        continue
                    caught, lost = rates(xs, threshold)
                    n_a = sum(a for _, a in xs)
                    print(
                        f"| {language} | {signal} | {threshold:.2f} | {name} {split} | "
                        f"{lost:.2f} of {n_a} | {caught:.2f} of {len(xs) - n_a} |"
                    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--out", help="write the raw scores here (JSON lines)")
    parser.add_argument("--analyse", help="read raw scores from a previous --out instead")
    parser.add_argument("--max-false", type=float, default=0.10)
    args = parser.parse_args()
    rows = raw_scores(args, collect)
    shipped = load_config(Path(args.config)).query.rerank.min_score or {}
    analyse(rows, args.max_false, shipped if isinstance(shipped, dict) else {})


if __name__ == "__main__":
    main()
