"""Quoted-answer rule variants on the development half of the generated description
questions (answers-en.jsonl), one engine for all variants: what benchmarks/results/generator.md
reports under "Tried and did not help" ("Quoted answers"). The test half is never read.

    .venv/bin/python -m benchmarks.experiments.rules_probe [VARIANT ...]   # default: every variant

Needs the evaluation data directory of the answer benchmarks (benchmarks/.cache/eval/data,
with the wiki-en tenant) and the fetched default model and judge.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import serve.query.pipeline as pipeline_module
from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import resolve_model
from serve.eval.run import EvalQuestion, Evaluator
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]

SHIPPED = pipeline_module.QUOTED_RULES
ASKED = (
    '"answer" is a brief answer to the question, in the language of the question, taken '
    "from the quote."
)
VARIANTS = {
    "base": SHIPPED,
    "name": SHIPPED.replace(
        ASKED,
        ASKED[:-1] + ": the name, number, date or phrase that the question asks for, not a "
        "restatement of the question.",
    ),
}
assert VARIANTS["name"] != SHIPPED, "the shipped rules changed: update ASKED"
QUESTIONS = ROOT / "benchmarks" / "eval" / "answers-en.jsonl"


async def main(names: list[str]) -> None:
    data_dir = ROOT / "benchmarks" / ".cache" / "eval" / "data"
    config = load_config(ROOT / "configs" / "cpu.yaml", data_dir=data_dir)
    service = IndexService(config.index, config.data_dir).start()
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    pipeline = pipeline_module.QueryPipeline(LocalSearcher(service), generator, config.query)
    raw = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    questions = [EvalQuestion.model_validate(q) for q in raw
                 if q["split"] == "dev" and q.get("kind") == "description"]  # fmt: skip
    try:
        for name in names:
            pipeline_module.QUOTED_RULES = VARIANTS[name]
            evaluator = Evaluator(pipeline, "wiki-en")
            results = [await evaluator.evaluate(q) for q in questions]
            matched = sum(bool(r.matched) for r in results)
            abstained = sum(bool(r.abstained) for r in results)
            count = len(results)
            print(json.dumps({"variant": name, "questions": count,
                              "match": round(matched / count, 3),
                              "false_abstentions": round(abstained / count, 3)}))  # fmt: skip
    finally:
        generator.shutdown()


if __name__ == "__main__":
    names = sys.argv[1:] or list(VARIANTS)
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    asyncio.run(main(names))
