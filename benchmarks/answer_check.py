"""Can the default generator (qwen2.5-1.5b) check a quoted answer after the fact? For every
answered question of a recorded run (the red-team sets' results written by
benchmarks/redteam/run.py: legitimate cases and the business questions the documents do not
answer; optionally a `grounded eval --json` output over the wiki tenants), the answer is shown to
the model again, with either the quoted sentence or the whole cited chunk, and its P(yes) to
"does it state this answer to the question?" is recorded (first-token log-probabilities, as the
generator reranker reads them). A check that turns "no" into "not found" must score the correct
answers above the wrong ones and the unanswerable ones.

    .venv/bin/python benchmarks/answer_check.py --out benchmarks/eval/answer-check.jsonl \
        [--eval human-en=<grounded eval --json output>]
    .venv/bin/python benchmarks/answer_check.py --analyse benchmarks/eval/answer-check.jsonl

A threshold is chosen on the development set (redteam) and reported on the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.business_gate import unanswerable  # noqa: E402
from benchmarks.retrieval_quality import CACHE  # noqa: E402
from benchmarks.sentence_gate import raw_scores  # noqa: E402
from index.pipeline import discover  # noqa: E402
from index.service import IndexService  # noqa: E402
from serve.config import load_config  # noqa: E402
from serve.generator import VllmGenerator  # noqa: E402
from serve.models import resolve_model  # noqa: E402
from serve.query.pipeline import QueryOptions, QueryPipeline  # noqa: E402
from serve.query.prompt import PromptBuilder  # noqa: E402
from serve.query.quotes import CHECK_SYSTEM, CHECK_USER  # noqa: E402
from serve.query.rerank import RerankConfig, yes_no_tokens, yes_probability  # noqa: E402
from serve.query.retrieval import LocalSearcher  # noqa: E402

RED_TEAM = ("redteam", "redteam-heldout", "redteam-heldout2")
# The shipped check (serve.query.quotes.AnswerCheck) reads the cited chunk: "chunk" here, with
# the chunk's stored text (the shipped check leaves withheld passages out). "quote": the same
# question about the quoted sentence alone.
READINGS = {
    "chunk": CHECK_USER,
    "quote": CHECK_USER.replace("Source:", "Sentence:").replace("the source", "the sentence"),
}
_MARKER = re.compile(r"\s*\[\d+\]\s*$")


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


async def cited_chunk(pipeline, tenant: str, question: str, quote: str) -> str | None:
    """The first candidate whose text holds the quote: the chunk the answer cited, unless the
    quote is in two overlapping chunks (then possibly its neighbour; h2-19 scored 0.86 here and
    0.36 on the chunk it cited, which lacks the answer). The live runs (redteam/run.py, eval)
    are the reference; this is for choosing a threshold without re-generating the answers."""
    hits = await pipeline.retrieve(tenant, question, QueryOptions(top_k=40, gate=False))
    return next((h.text for h in hits if _normalise(quote) in _normalise(h.text)), None)


async def check(generator, pipeline, tenant: str, row: dict) -> dict:
    escape = PromptBuilder(generator.special_tokens).escape
    chunk = await cited_chunk(pipeline, tenant, row["question"], row["quote"])
    answer = _MARKER.sub("", row["answer"])
    out = dict(row, found_chunk=chunk is not None)
    for reading, template in READINGS.items():
        evidence = row["quote"] if reading == "quote" else chunk
        if evidence is None:
            continue
        user = template.format(
            source=escape(evidence), question=escape(row["question"]), answer=escape(answer)
        )
        prompt = generator.render(
            [{"role": "system", "content": CHECK_SYSTEM}, {"role": "user", "content": user}]
        )
        started = time.perf_counter()
        out[reading] = await yes_probability(
            generator, prompt, yes_no_tokens(generator), "answer-check"
        )
        out[f"{reading}_s"] = time.perf_counter() - started
    return out


def red_team_rows(name: str, results: str) -> list[dict]:
    folder = ROOT / "benchmarks" / name
    questions = {
        c["id"]: c["question"]
        for c in map(json.loads, (folder / "cases.jsonl").read_text().splitlines())
    }
    questions |= {q["id"]: q["question"] for q in unanswerable()}
    rows = []
    for r in map(json.loads, (folder / "results" / results).read_text().splitlines()):
        if r["abstained"] or not r.get("quote"):
            continue
        outcome = (
            "unanswerable" if r.get("unanswerable") else ("correct" if r["correct"] else "wrong")
        )
        rows.append(
            {
                "set": name,
                "id": r["id"],
                "question": questions[r["id"]],
                "answer": r["answer"],
                "quote": r["quote"],
                "outcome": outcome,
            }
        )
    return rows


def eval_rows(name: str, path: str) -> list[dict]:
    report = json.loads(Path(path).read_text())
    rows = []
    for q in report["questions"]:
        if q["abstained"] or not q.get("quote"):
            continue
        if q["answerable"] and q.get("matched") is None:  # no answer strings to match
            continue
        outcome = "unanswerable" if not q["answerable"] else "correct" if q["matched"] else "wrong"
        rows.append(
            {
                "set": name,
                "id": q["id"],
                "question": q["question"],
                "answer": q["answer"],
                "quote": q["quote"],
                "outcome": outcome,
            }
        )
    return rows


async def collect(args) -> list[dict]:
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    query = config.query.model_copy(update={"rerank": RerankConfig()})
    out = []
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            service = IndexService(config.index, Path(data_dir)).start()
            pipeline = QueryPipeline(LocalSearcher(service), None, query)
            for name in RED_TEAM:
                list(
                    service.pipeline(name).ingest(
                        discover([ROOT / "benchmarks" / name / "docs"])[0]
                    )
                )
                for row in red_team_rows(name, args.results):
                    out.append(await check(generator, pipeline, name, row))
                print(f"{name}: done", file=sys.stderr, flush=True)
            service.close()
        service = IndexService(config.index, config.data_dir).start()
        pipeline = QueryPipeline(LocalSearcher(service), None, query)
        for item in args.eval:
            name, path = item.split("=", 1)
            tenant = "wiki-" + name.rsplit("-", 1)[-1]
            for row in eval_rows(name, path):
                out.append(await check(generator, pipeline, tenant, row))
            print(f"{name}: done", file=sys.stderr, flush=True)
        service.close()
    finally:
        generator.shutdown()
    return out


def analyse(rows: list[dict]) -> None:
    print(
        "| reading | threshold (redteam) | set | correct kept | wrong stopped | "
        "unanswerable stopped |\n|---|---|---|---|---|---|"
    )
    for reading in READINGS:
        dev = [r for r in rows if r["set"] == "redteam" and reading in r]
        good = sorted(r[reading] for r in dev if r["outcome"] == "correct")
        # the highest threshold that keeps at least 95 % of the development set's correct answers
        threshold = good[int(0.05 * len(good))] if good else 0.5
        for name in dict.fromkeys(r["set"] for r in rows):
            mine = [r for r in rows if r["set"] == name and reading in r]
            cells = []
            for outcome, keep in (("correct", True), ("wrong", False), ("unanswerable", False)):
                xs = [r[reading] >= threshold for r in mine if r["outcome"] == outcome]
                cells.append(f"{sum(x == keep for x in xs)} of {len(xs)}")
            print(f"| {reading} | {threshold:.3f} | {name} | " + " | ".join(cells) + " |")


def live_rows(name: str, path: str) -> list[dict]:
    """Every question of a `grounded eval --json` run made with the check at threshold 0
    (``GROUNDED_QUERY__MIN_ANSWER_SUPPORT=0``): it checked every answer and withheld none, so
    each answer's live ``answer_support`` is recorded beside its outcome."""
    rows = []
    for q in json.loads(Path(path).read_text())["questions"]:
        outcome = "unanswerable" if not q["answerable"] else "correct" if q["matched"] else "wrong"
        support = None if q["abstained"] else q.get("answer_support")
        rows.append({"set": name, "id": q["id"], "outcome": outcome, "chunk": support,
                     "abstained": q["abstained"]})  # fmt: skip
    return rows


def sweep(rows: list[dict], thresholds: list[float]) -> None:
    """Per set and threshold: answerable questions answered "not found" (false abstentions:
    the model's own, and answers the check withholds, right or wrong) and unanswerable ones
    answered "not found". Red-team rows hold only the answered questions: counts, not rates."""
    sets = list(dict.fromkeys(r["set"] for r in rows))
    print("| threshold | " + " | ".join(sets) + " |\n|---|" + "---|" * len(sets))
    for t in thresholds:
        cells = []
        for name in sets:
            mine = [r for r in rows if r["set"] == name and "chunk" in r]

            def withheld(r: dict, t: float = t) -> bool:
                return r.get("abstained") or r["chunk"] is None or r["chunk"] < t

            answerable = [r for r in mine if r["outcome"] != "unanswerable"]
            unanswerable = [r for r in mine if r["outcome"] == "unanswerable"]
            if name in RED_TEAM:
                kept = sum(not withheld(r) for r in answerable if r["outcome"] == "correct")
                stopped = sum(withheld(r) for r in unanswerable)
                cells.append(
                    f"correct kept {kept}, unanswerable stopped {stopped}/{len(unanswerable)}"
                )
            else:
                false = sum(map(withheld, answerable)) / len(answerable)
                found = sum(map(withheld, unanswerable)) / len(unanswerable)
                cells.append(f"false abstentions {false:.2f}, unanswerable {found:.2f}")
        print(f"| {t:.3f} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--results", default="qwen2.5-1.5b-quoted-unchecked.jsonl")
    parser.add_argument(
        "--eval",
        action="append",
        default=[],
        help="NAME=PATH: a `grounded eval --json` output over wiki-<lang>",
    )
    parser.add_argument("--out")
    parser.add_argument("--analyse")
    parser.add_argument(
        "--live",
        action="append",
        default=[],
        help="NAME=PATH: a `grounded eval --json` output made with the check at threshold 0; "
        "with --sweep, its live answer_support values",
    )
    parser.add_argument("--sweep", type=float, nargs="+", help="thresholds to compare")
    args = parser.parse_args()
    rows = raw_scores(args, collect)
    if args.sweep:
        live = [row for item in args.live for row in live_rows(*item.split("=", 1))]
        sweep([r for r in rows if r["set"] in RED_TEAM] + live, args.sweep)
    else:
        analyse(rows)


if __name__ == "__main__":
    main()
