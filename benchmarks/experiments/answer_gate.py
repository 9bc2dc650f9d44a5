"""The judge gate as an abstention rule only: does the model answer better when a question that
clears the gate gets its best sources whatever their judged scores, and when the gate is set
lower than the shipped one (`query.rerank.min_score`), leaving the rest to the model's own
`source: 0`?

The shipped gate both turns a question away (no candidate clears it) and drops every candidate
under it from the prompt. Here each question is answered once with the judge gate off (the
judge still reranks; the similarity gate and everything else as configured), and the best
judge score among its sources is kept. The rule "abstain when the best score is under t, else
the model's answer" is then exact for every t at once. t is chosen on the dev half (most
questions handled right: answerable ones matched, unanswerable ones turned away) and reported
on the test half only when --split test is asked for.

    .venv/bin/python -m benchmarks.experiments.answer_gate [--sets human-en,answers-en]
        [--split dev] [--thresholds 4.122,-0.16] [--out results.jsonl]
    .venv/bin/python -m benchmarks.experiments.answer_gate --sets '' \
        --rows benchmarks/eval/answer-gate-human-en-dev.jsonl     # the run reported in
        # benchmarks/results/judge.md, "The judge gate as an abstention rule only"

Needs the evaluation data directory of the answer benchmarks (benchmarks/.cache/eval/data,
with the wiki-en / wiki-fr tenants) and the fetched default model and judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import resolve_model
from serve.eval.run import AnswerView, Evaluator, LocalBackend, load_questions
from serve.query.pipeline import QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]

EVAL = ROOT / "benchmarks" / "eval"


class ScoredBackend(LocalBackend):
    """The in-process backend, keeping each answer's best judge score among its sources."""

    def __init__(self, pipeline: QueryPipeline, tenant: str) -> None:
        super().__init__(pipeline, tenant)
        self.best: dict[str, float | None] = {}

    async def ask(self, question: str) -> AnswerView:
        answer = await self.pipeline.answer(self.tenant, question)
        scores = [s.hit.rerank_score for s in answer.sources if s.hit.rerank_score is not None]
        self.best[question] = max(scores, default=None)
        return AnswerView.of(answer)


def outcomes(rows: list[dict], threshold: float) -> dict[str, float | int]:
    """The figures of the rule 'abstain when the best score is under ``threshold``'."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]

    def turned_away(row: dict) -> bool:
        return row["abstained"] or row["best"] is None or row["best"] < threshold

    matched = [r for r in answerable if not turned_away(r) and r["matched"]]
    right = len(matched) + sum(turned_away(r) for r in unanswerable)
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "answer_match": len(matched) / len(answerable) if answerable else float("nan"),
        "false_abstentions": sum(map(turned_away, answerable)) / len(answerable)
        if answerable
        else float("nan"),
        "unanswerable_turned_away": sum(map(turned_away, unanswerable)) / len(unanswerable)
        if unanswerable
        else float("nan"),
        "handled_right": right / len(rows),
    }


def choose(rows: list[dict]) -> float:
    """The threshold that handles the most dev questions right (the lowest such)."""
    candidates = sorted({r["best"] for r in rows if r["best"] is not None} | {-99.0})
    return max(candidates, key=lambda t: (outcomes(rows, t)["handled_right"], -t))


async def answer_all(sets: list[str], split: str) -> list[dict]:
    data_dir = ROOT / "benchmarks" / ".cache" / "eval" / "data"
    config = load_config(ROOT / "configs" / "cpu.yaml", data_dir=data_dir)
    rerank = config.query.rerank.model_copy(update={"min_score": None})
    query = config.query.model_copy(update={"rerank": rerank})
    service = IndexService(config.index, config.data_dir).start()
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    pipeline = QueryPipeline(LocalSearcher(service), generator, query)
    rows = []
    try:
        for name in sets:
            path = EVAL / f"{name}.jsonl"
            kinds = {item["id"]: item.get("kind")
                     for item in map(json.loads, path.read_text().splitlines())}  # fmt: skip
            questions = [q for q in load_questions(path) if q.split == split]
            tenant = f"wiki-{language(name)}"
            backend = ScoredBackend(pipeline, tenant)
            evaluator = Evaluator(backend, tenant)
            for q in questions:
                result = await evaluator.evaluate(q)
                rows.append({"set": name, "id": q.id, "kind": kinds[q.id], "split": split,
                             "answerable": q.answerable, "abstained": bool(result.abstained),
                             "matched": bool(result.matched), "best": backend.best[q.question],
                             "answer": result.answer})  # fmt: skip
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        generator.shutdown()
        service.close()
    return rows


def language(name: str) -> str:
    """human-en -> en."""
    return name.rsplit("-", 1)[-1]


def report(rows: list[dict], thresholds: list[float], chosen: dict[str, float]) -> None:
    print("| set | half | threshold | answer match | false abstentions | unanswerable turned "
          "away | handled right |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in sorted({r["set"] for r in rows}):
        for split in ("dev", "test"):
            part = [r for r in rows if r["set"] == name and r["split"] == split]
            if not part:
                continue
            picked = chosen.get(language(name))
            shown = [*thresholds, -99.0] + ([picked] if picked is not None else [])
            for t in sorted(set(shown), reverse=True):
                o = outcomes(part, t)
                label = f"{t:.3f}" + (" (chosen on dev)" if picked == t else "")
                label = "none (the model alone)" if t == -99.0 else label
                print(f"| {name} | {split} | {label} | {o['answer_match']:.2f} | "
                      f"{o['false_abstentions']:.2f} | {o['unanswerable_turned_away']:.2f} | "
                      f"{o['handled_right']:.2f} |")  # fmt: skip
            if name.startswith("answers"):  # description questions alone
                described = [r for r in part if r["kind"] == "description"]
                for t in sorted(set(shown), reverse=True):
                    o = outcomes(described, t)
                    print(f"| {name} description | {split} | {t:.3f} | {o['answer_match']:.2f} "
                          f"| {o['false_abstentions']:.2f} | - | - |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", default="human-en,answers-en",
                        help="question sets to answer ('' with --rows: only report)")  # fmt: skip
    parser.add_argument("--split", default="dev", choices=("dev", "test"))
    parser.add_argument("--thresholds", default="4.122",
                        help="thresholds to report beside the chosen one")  # fmt: skip
    parser.add_argument("--out", type=Path, help="keep every answer (JSON lines)")
    parser.add_argument("--rows", type=Path, nargs="*", default=[],
                        help="earlier --out files to report with (the dev run, for a test "
                        "run: the threshold is chosen on its rows)")  # fmt: skip
    args = parser.parse_args()
    sets = [name for name in args.sets.split(",") if name]
    missing = [name for name in sets if not (EVAL / f"{name}.jsonl").is_file()]
    if missing:  # before the model loads
        sys.exit(f"no question set {', '.join(missing)} in {EVAL} (e.g. human-en, answers-en)")
    if not sets and not args.rows:
        sys.exit("nothing to report: give --sets to answer, or --rows from an earlier --out")
    rows = [json.loads(line) for path in args.rows for line in path.read_text().splitlines()]
    fresh = asyncio.run(answer_all(sets, args.split)) if sets else []
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in fresh))
    rows += fresh
    # One threshold per language (the config's shape), chosen on every dev set of it.
    chosen = {language(name): choose([r for r in rows if language(r["set"]) == language(name)
                                      and r["split"] == "dev"])
              for name in {r["set"] for r in rows if r["split"] == "dev"}}  # fmt: skip
    report(rows, [float(t) for t in args.thresholds.split(",")], chosen)


if __name__ == "__main__":
    main()
