"""Retrieval quality on the Wikipedia evaluation sets: dense, lexical, and both fusions, side by
side, in English and French; optionally with the generator reranker on a sample.

    .venv/bin/python -m benchmarks.retrieval_quality [--rerank 40] [--config configs/cpu.yaml]

Builds (once) a tenant per language from benchmarks/eval/wiki-<lang>.titles under
benchmarks/.cache/eval, then runs every answerable question of benchmarks/eval/wiki-<lang>.jsonl
through `grounded eval`'s evaluator (retrieval only, no evidence gate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE, write_corpus
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.eval.run import Evaluator, load_questions, summarize
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent

CACHE = ROOT / "benchmarks" / ".cache" / "eval"
VARIANTS = {
    "dense": {"mode": "dense"},
    "lexical": {"mode": "lexical"},
    "hybrid rrf": {"mode": "hybrid", "fusion": "rrf"},
    **{
        f"hybrid weighted {w}": {"mode": "hybrid", "fusion": "weighted", "dense_weight": w}
        for w in (0.3, 0.4, 0.5, 0.7)
    },
}
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")
HEADER = "| retrieval | " + " | ".join(METRICS) + " |\n|---|" + "---|" * len(METRICS)


def build_tenant(service: IndexService, language: str) -> None:
    files, _ = discover([write_corpus(language, CACHE / f"corpus-{language}")[0].parent])
    started = time.perf_counter()
    results = list(service.pipeline(f"wiki-{language}").ingest(files))
    added = sum(r.status == "added" for r in results)
    print(f"{language}: {len(results)} documents ({added} newly added) "
          f"in {time.perf_counter() - started:.0f}s", file=sys.stderr)  # fmt: skip


async def measure(service, generator, language, query_config, questions):
    pipeline = QueryPipeline(LocalSearcher(service), generator, query_config)
    evaluator = Evaluator(pipeline, f"wiki-{language}", answers=False)
    results = [await evaluator.evaluate(q) for q in questions]
    return summarize(results), results


def row(name: str, summary: dict) -> str:
    return f"| {name} | " + " | ".join(f"{summary[m]:.3f}" for m in METRICS) + " |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--rerank", type=int, default=0, help="questions per language to rerank")
    parser.add_argument("--languages", default="en,fr")
    parser.add_argument("--no-variants", action="store_true", help="only the rerank sample")
    args = parser.parse_args()
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    service = IndexService(config.index, config.data_dir).start()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; config {args.config}")
    for language in args.languages.split(","):
        build_tenant(service, language)
        if args.no_variants:
            continue
        path = HERE / f"wiki-{language}.jsonl"
        questions = [q for q in load_questions(path) if q.relevant]
        kinds: dict[str, set[str]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item.get("relevant_files"):
                kinds.setdefault(item["kind"], set()).add(item["id"])
        print(f"\n### {language}: {len(questions)} questions with a known relevant document\n")
        print(HEADER)
        by_kind: dict[str, dict[str, float]] = {}
        for name, variant in VARIANTS.items():
            summary, results = await measure(
                service, None, language, QueryConfig(**variant), questions
            )
            print(row(name, summary), flush=True)
            for kind, ids in kinds.items():
                picked = [r.retrieval["mrr@10"] for r in results if r.id in ids]
                by_kind.setdefault(name, {})[kind] = sum(picked) / len(picked)
        print(f"\nMRR@10 by kind of question ({language})\n")
        print("| retrieval | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
        for name, values in by_kind.items():
            print(f"| {name} | " + " | ".join(f"{values[k]:.3f}" for k in kinds) + " |")
    if args.rerank:
        await rerank_sample(config, service, args)
    service.close()


async def rerank_sample(config, service, args) -> None:
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model

    models_dir = load_config(Path(args.config)).data_dir  # the model lives in the usual place
    model = resolve_model(config.generator.model, models_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    try:
        for language in args.languages.split(","):
            every = [q for q in load_questions(HERE / f"wiki-{language}.jsonl") if q.relevant]
            sample = every[:: max(1, len(every) // args.rerank)][: args.rerank]
            print(f"\n### {language}: generator reranking, {len(sample)} questions "
                  f"(every {max(1, len(every) // args.rerank)}th), 10 candidates in\n")  # fmt: skip
            print(HEADER.replace(" |\n", " | seconds per question |\n", 1) + "---|")
            base = {"mode": "hybrid", "fusion": config.query.fusion,
                    "dense_weight": config.query.dense_weight}  # fmt: skip
            for name, rerank in (
                ("hybrid", RerankConfig()),
                ("hybrid + generator rerank", RerankConfig(backend="generator", candidates=10)),
            ):
                query_config = QueryConfig(**base, rerank=rerank, top_k=10)
                started = time.perf_counter()
                summary, _ = await measure(service, generator, language, query_config, sample)
                per_question = (time.perf_counter() - started) / len(sample)
                print(row(name, summary) + f" {per_question:.2f} |", flush=True)
    finally:
        generator.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
