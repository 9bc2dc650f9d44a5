"""Does the demo's stock question get the same answer however the engine is asked? The demo's
corpus is ingested and the shipped CPU config (qwen2.5-1.5b, the answer check) answers the demo's
questions all at once (as serve/ops/demo.py asks them) ``--rounds`` times, then the stock question
alone ``--alone`` times; each answer to it is printed with its check's P(yes), the answer the
check read (what was withheld), the prompt's length and how much of it came from the prefix
cache.

    .venv/bin/python -m benchmarks.experiments.demo_flip [--rounds 2] [--alone 2]

It needs the 1.5B model in data/models (`grounded models fetch qwen2.5-1.5b`) and the judge.

Conclusion (2026-12-06, 1 min 55 s): batched, "1450 [2]" (P(yes) 0.755 both rounds; 0.778 in
the second round of an earlier run); alone after the batched rounds, with 384 of its prompt
tokens cached, "14" from the delivery note, withheld by the check (0.548, 0.532: the CI failure
of 0c00b1f). The same prompt (474 tokens, one hash) every time, another engine state: the
question is at the model's limit (benchmarks/results/answer-check.md, "A second try").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from index.config import EmbedderConfig
from index.embedding import SentenceTransformerEmbedder
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import fetch, models_dir
from serve.ops.demo import CORPUS, QUESTIONS
from serve.query.check import AnswerCheck
from serve.query.pipeline import QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]
STOCK = "How many large cardboard boxes are in stock in Rotterdam?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2, help="all the questions at once")
    parser.add_argument("--alone", type=int, default=2, help="then the stock question alone")
    args = parser.parse_args()
    checked: dict[str, str] = {}  # question: the last answer the check read for it
    messages = AnswerCheck.messages

    def recording(self, question, answer, source, *more):
        if answer:  # (an empty answer: the reservation's sizing, not a check)
            checked[question] = answer
        return messages(self, question, answer, source, *more)

    AnswerCheck.messages = recording
    with tempfile.TemporaryDirectory(prefix="demo-flip-") as folder:
        data = Path(folder)
        config = load_config(ROOT / "configs" / "cpu.yaml", data_dir=data)
        rerank = config.query.rerank
        judge = fetch(Path(rerank.model).name, ROOT / "data")
        query = config.query.model_copy(
            update={"rerank": rerank.model_copy(update={"model": str(judge)})}
        )
        embedder = SentenceTransformerEmbedder(EmbedderConfig(device="cpu")).start()
        service = IndexService(config.index, data, embedder=embedder).start()
        try:
            for tenant in QUESTIONS:
                list(service.pipeline(tenant).ingest(discover([CORPUS / tenant])[0]))
            model = models_dir(ROOT / "data") / config.generator.model
            generator_config = config.generator.model_copy(update={"model": str(model)})
            asyncio.run(_ask(args, service, generator_config, query, checked))
        finally:
            service.close()


async def _ask(args, service, generator_config, query, checked: dict[str, str]) -> None:
    """The rounds, on one event loop (the engine's output handler lives on it)."""
    generator = VllmGenerator(generator_config).start()
    pipeline = QueryPipeline(LocalSearcher(service), generator, query)
    asks = [(tenant, q) for tenant, questions in QUESTIONS.items() for q in questions]

    async def show(label: str, answer) -> None:
        prepared = await pipeline.prepare("initech", STOCK)
        print(f"{label}: the answer's prompt {len(prepared.token_ids)} tokens, "
              f"hash {hash(tuple(prepared.token_ids))}")  # fmt: skip
        usage = answer.usage
        print(f"{label}: {answer.text!r} P(yes) {answer.answer_support} "
              f"checked {checked.pop(STOCK, None)!r} "
              f"prompt+check tokens {usage.prompt_tokens}, cached {usage.cached_tokens}",
              flush=True)  # fmt: skip

    try:
        for round_ in range(args.rounds):
            answers = await asyncio.gather(
                *(pipeline.answer(t, q, max_tokens=160) for t, q in asks)
            )
            await show(f"batched {round_}", answers[[q for _, q in asks].index(STOCK)])
        for turn in range(args.alone):
            await show(f"alone {turn}", await pipeline.answer("initech", STOCK, max_tokens=160))
    finally:
        generator.shutdown()


if __name__ == "__main__":
    main()
