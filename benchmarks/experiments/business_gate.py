"""Does the judge gate carry to short business documents? On the red-team sets' documents (a
tenant per set, as benchmarks/redteam/run.py builds it), each case's legitimate question
(answerable) and the set's question of benchmarks/eval/business-unanswerable.jsonl (about the
same organisation, answered nowhere): the best judge score among the 20 candidates the query
path reads, against the shipped per-language thresholds (`query.rerank.min_score`), and a
threshold chosen on the development set (redteam) by judge_gate.py's rule. No generator.

    .venv/bin/python -m benchmarks.experiments.business_gate \
        [--sets redteam,redteam-heldout,redteam-heldout2]

Two readings of a candidate: its text (what the query path judges), and its heading path
(title > section) followed by its text.

After the gate, the answers: from a run's results (benchmarks/<set>/results/<--results>, written
by benchmarks/redteam/run.py with the quotes), the judge's score of each answered question
against the sentence the model quoted, by outcome (correct, wrong, unanswerable answered): would
a judge on the quote tell a wrong answer from a right one?
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.judge_gate import choose, rates
from benchmarks.redteam.sets import unanswerable
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch
from serve.query.judging import RerankConfig
from serve.query.language import detect_language
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.rerankers import OnnxCrossEncoderReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]

READINGS = {
    "text": lambda hit: hit.text,
    "heading path + text": lambda hit: (
        "\n\n".join([" > ".join(hit.heading_path), hit.text]) if hit.heading_path else hit.text
    ),
}


async def best_scores(service: IndexService, config, judge, name: str) -> list[dict]:
    """Per question of the set (its documents ingested as a tenant of ``service``): its
    language, whether it is answerable, and per reading the best judge score among the
    candidates (-99 when nothing is retrieved)."""
    folder = ROOT / "benchmarks" / name
    files, _ = discover([folder / "docs"])
    list(service.pipeline(name).ingest(files))
    query = config.query.model_copy(update={"rerank": RerankConfig()})  # as retrieved
    pipeline = QueryPipeline(LocalSearcher(service), None, query)
    cases = map(json.loads, (folder / "cases.jsonl").read_text().splitlines())
    questions = [(c["question"], True) for c in cases]
    questions += [(q["question"], False) for q in unanswerable() if q["set"] == name]
    rows = []
    for question, answerable in questions:
        options = QueryOptions(top_k=config.query.rerank.candidates, gate=False)
        hits = await pipeline.retrieve(name, question, options)
        row = {"language": detect_language(question), "answerable": answerable}
        for reading, read in READINGS.items():
            scores = await judge.scores(question, [read(h) for h in hits]) if hits else []
            row[reading] = max(scores, default=-99.0)
        rows.append(row)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--sets", default="redteam,redteam-heldout,redteam-heldout2")
    parser.add_argument("--max-false", type=float, default=0.10)
    parser.add_argument("--results", default="qwen2.5-1.5b-quoted-unchecked.jsonl")
    args = parser.parse_args()
    sets = args.sets.split(",")
    if unknown := [name for name in sets if not (ROOT / "benchmarks" / name / "docs").is_dir()]:
        parser.error(f"--sets: no red-team set {', '.join(unknown)} under benchmarks/ "
                     "(redteam, redteam-heldout, redteam-heldout2)")  # fmt: skip
    config = load_config(Path(args.config))
    shipped = config.query.rerank.min_score
    rerank = config.query.rerank  # the query path's judge, as configured
    folder = str(fetch("ms-marco-minilm-l12", ROOT / "data"))
    judge = OnnxCrossEncoderReranker(folder, "cpu", max_tokens=rerank.max_tokens,
                                     window=rerank.window).start()  # fmt: skip
    with tempfile.TemporaryDirectory() as data_dir:  # a tenant per set
        service = IndexService(config.index, Path(data_dir)).start()
        by_set = {name: await best_scores(service, config, judge, name) for name in sets}
        service.close()
    dev = by_set.get("redteam", [])
    print(f"thresholds: shipped {shipped}; chosen on redteam (English questions, at most "
          f"{args.max_false:.0%} of the answerable turned away)\n")  # fmt: skip
    print("| set | reading | threshold | answerable turned away | unanswerable turned away |")
    print("|---|---|---|---|---|")
    for reading in READINGS:
        english = [(r[reading], r["answerable"]) for r in dev if r["language"] == "en"]
        chosen = choose(english, args.max_false) if english else None
        for name, rows in by_set.items():
            gated = [(r[reading], r["answerable"], shipped.get(r["language"])) for r in rows]
            gated = [(s, a, t) for s, a, t in gated if t is not None]
            answerable = [s < t for s, a, t in gated if a]
            unanswerable = [s < t for s, a, t in gated if not a]
            print(f"| {name} | {reading} | shipped | {sum(answerable)} of {len(answerable)} | "
                  f"{sum(unanswerable)} of {len(unanswerable)} |")  # fmt: skip
            if chosen is not None:
                english = [(r[reading], r["answerable"]) for r in rows if r["language"] == "en"]
                caught, lost = rates(english, chosen)
                print(f"| {name} (English) | {reading} | {chosen:.3f} (dev) | {lost:.2f} | "
                      f"{caught:.2f} |", flush=True)  # fmt: skip
    await quote_scores(judge, sets, args.results, [-5.0, -2.5, 0.0, 2.5])


async def quote_scores(judge, sets: list[str], results: str, thresholds: list[float]) -> None:
    """Per set and threshold, the answered questions whose quote the judge scores under it."""
    questions = {q["id"]: q["question"] for q in unanswerable()}
    print("\n| set | quote judge threshold | correct answers under it | wrong answers under it | "
          "unanswerable answered, under it |\n|---|---|---|---|---|")  # fmt: skip
    for name in sets:
        path = ROOT / "benchmarks" / name / "results" / results
        if not path.is_file():
            continue
        folder = path.parent.parent
        cases = (folder / "cases.jsonl").read_text().splitlines()
        questions |= {c["id"]: c["question"] for c in map(json.loads, cases)}
        answered = [r for r in map(json.loads, path.read_text().splitlines())
                    if not r["abstained"] and r.get("quote")]  # fmt: skip
        if not answered:  # no quotes: a run from before run.py recorded them
            continue
        scored = [((await judge.scores(questions[r["id"]], [r["quote"]]))[0],
                   "unanswerable" if r.get("unanswerable") else
                   "correct" if r["correct"] else "wrong") for r in answered]  # fmt: skip
        for threshold in thresholds:
            counts = {kind: (sum(s < threshold for s, k in scored if k == kind),
                             sum(k == kind for _, k in scored))
                      for kind in ("correct", "wrong", "unanswerable")}  # fmt: skip
            cells = " | ".join(f"{under} of {total}" for under, total in counts.values())
            print(f"| {name} | {threshold} | {cells} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
