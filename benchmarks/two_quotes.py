"""What a second quote costs: the demo's compound question ("Quel est le numéro du contrat de
maintenance et sa durée ?", two facts in two articles) answered with the two-quote reply
(serve/query/compound.py ``answered_apart`` on, as shipped) and with the one-quote reply
(forced off), alternating in one process: generated tokens, seconds per token, the answer.

    make demo ONCE=1   # once: the models and the sample corpus in data/demo
    .venv/bin/python -m benchmarks.two_quotes [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Quel est le numéro du contrat de maintenance et sa durée ?"


async def run(rounds: int) -> None:
    from index.service import IndexService
    from serve.config import load_config
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model
    from serve.query import pipeline as stages
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher

    config = load_config(ROOT / "configs" / "cpu.yaml", data_dir=ROOT / "data" / "demo")
    service = IndexService(config.index, config.data_dir).start()
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    shipped = stages.answered_apart
    totals = {"two quotes": [0, 0.0], "one quote": [0, 0.0]}
    try:
        pipeline = QueryPipeline(LocalSearcher(service), generator, config.query)
        for _ in range(rounds):
            for name in totals:
                stages.answered_apart = shipped if name == "two quotes" else lambda hits: False
                answer = await pipeline.answer("globex", QUESTION, max_tokens=160)
                seconds = answer.timings["generate"] - answer.timings.get("check", 0.0)
                tokens = answer.usage.completion_tokens - (answer.answer_support is not None)
                totals[name][0] += tokens
                totals[name][1] += seconds
                print(f"{name}: {tokens} tokens, {seconds:.1f} s: {answer.text}", flush=True)
    finally:
        stages.answered_apart = shipped
        generator.shutdown()
        service.close()
    for name, (tokens, seconds) in totals.items():
        print(f"{name}: {tokens} tokens, {seconds / tokens:.3f} s per token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
