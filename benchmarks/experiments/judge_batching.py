"""Does the relevance judge's score for a (question, passage) pair depend on the other pairs it
is batched with, and what does scoring pair by pair cost? For human-written dev questions, the
20 candidates the query path's judge reads (hybrid, gates off) are scored at several batch
sizes, side by side in one run: the largest difference from the pair-by-pair score, and the
judge's seconds per question.

    .venv/bin/python -m benchmarks.experiments.judge_batching [--questions 30] \
        [--batch-sizes 32,16,4,1]

Uses the tenants that human_retrieval.py / retrieval_quality.py build (benchmarks/.cache/eval).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE
from benchmarks.retrieval_quality import CACHE, build_tenant
from index.service import IndexService
from serve.config import load_config
from serve.eval.run import load_questions
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryOptions, QueryPipeline
from serve.query.rerankers import OnnxCrossEncoderReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parents[2]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    parser.add_argument("--questions", type=int, default=30, help="dev questions per language")
    parser.add_argument("--batch-sizes", default="32,16,4,1")
    args = parser.parse_args()
    sizes = [int(size) for size in args.batch_sizes.split(",")]
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    rerank = config.query.rerank
    judges = {size: OnnxCrossEncoderReranker(rerank.model, "cpu", size, rerank.max_tokens,
                                             rerank.window).start()
              for size in sorted(set(sizes) | {1})}  # fmt: skip
    service = IndexService(config.index, config.data_dir).start()
    # the candidates as retrieved, without the judge (it scores them all below)
    query = config.query.model_copy(update={"rerank": RerankConfig()})
    pipeline = QueryPipeline(LocalSearcher(service), None, query)
    print("| language | batch size | largest score difference from pair by pair | judge p50 |")
    print("|---|---|---|---|")
    for language in args.languages.split(","):
        build_tenant(service, language)
        questions = [q for q in load_questions(HERE / f"human-{language}.jsonl")
                     if q.split == "dev"][: args.questions]  # fmt: skip
        spread = {size: 0.0 for size in judges}
        seconds: dict[int, list[float]] = {size: [] for size in judges}
        for q in questions:
            options = QueryOptions(top_k=rerank.candidates, gate=False)
            passages = [h.text for h in await pipeline.retrieve(f"wiki-{language}", q.question,
                                                                options)]  # fmt: skip
            scores = {}
            for size, judge in judges.items():
                started = time.perf_counter()
                scores[size] = await judge.scores(q.question, passages)
                seconds[size].append(time.perf_counter() - started)
            for size in judges:
                pairs = zip(scores[size], scores[1], strict=True)
                spread[size] = max([spread[size], *(abs(a - b) for a, b in pairs)])
        for size in sizes:
            print(f"| {language} | {size} | {spread[size]:.2f} | "
                  f"{statistics.median(seconds[size]):.2f} s |", flush=True)  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
