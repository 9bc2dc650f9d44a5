"""Retrieval on human-written questions (benchmarks/eval/human-<lang>.jsonl), development and
held-out halves: dense, lexical, both fusions over a range of weights, and the relevance judge
(the ONNX cross-encoder that `grounded models fetch ms-marco-minilm-l12` installs) reranking
the candidates. A fusion weight is chosen on the dev half and every figure is also given on
the held-out (test) half.

    .venv/bin/python -m benchmarks.human_retrieval [--languages en,fr] [--max-tokens 128,256]
        [--windows start,query] [--judge-only --judge-on "hybrid weighted 0.4"]

Builds (once) a tenant per language from the Wikipedia sample (as retrieval_quality.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE, document, file_names, write_corpus
from benchmarks.retrieval_quality import CACHE, build_tenant
from benchmarks.wiki import articles
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch, models_dir
from serve.eval.run import Evaluator, load_questions, summarize
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.rerankers import OnnxCrossEncoderReranker
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent

WEIGHTS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9)
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10")
JUDGE = "ms-marco-minilm-l12"


class TimedReranker:
    """The judge, with the seconds of each call recorded."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds = inner, []

    async def scores(self, query, passages, cache_salt=""):
        started = time.perf_counter()
        scores = await self.inner.scores(query, passages, cache_salt)
        self.seconds.append(time.perf_counter() - started)
        return scores


async def measure(service, tenant, config: QueryConfig, questions, reranker=None) -> dict:
    pipeline = QueryPipeline(LocalSearcher(service), None, config, reranker)
    evaluator = Evaluator(pipeline, tenant, answers=False)
    return summarize([await evaluator.evaluate(q) for q in questions])


def cells(summary: dict) -> str:
    return " | ".join(f"{summary[m]:.3f}" for m in METRICS)


def build_full_tenant(service: IndexService, language: str, questions):
    """Every summary of the language as a tenant; the questions' relevant files renamed to the
    full corpus's file names (matched by article title)."""
    every = {a["title"]: a for a in articles(language)}
    names = file_names(sorted(every))
    folder = CACHE / f"corpus-{language}-full"
    folder.mkdir(parents=True, exist_ok=True)
    for title, name in names.items():
        if not (folder / name).exists():
            (folder / name).write_text(document(every[title]), encoding="utf-8")
    tenant = f"wiki-{language}-full"
    files, _ = discover([folder])
    started = time.perf_counter()
    list(service.pipeline(tenant).ingest(files))
    print(f"{language}: {len(files)} documents in {time.perf_counter() - started:.0f}s",
          file=sys.stderr)  # fmt: skip
    sample = CACHE / f"corpus-{language}"
    write_corpus(language, sample)
    title_of = {p.name: p.read_text(encoding="utf-8").split("\n", 1)[0].removeprefix("# ")
                for p in sample.glob("*.md")}  # fmt: skip
    renamed = [q.model_copy(update={"relevant_files": [names[title_of[f]]
                                                        for f in q.relevant_files]})
               for q in questions]  # fmt: skip
    return tenant, renamed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    parser.add_argument("--max-tokens", default="128,256", help="judge truncation(s)")
    parser.add_argument("--candidates", type=int, default=20, help="candidates the judge reads")
    parser.add_argument("--windows", default="start",
                        help="what the judge reads of a pair longer than --max-tokens: start "
                        "and/or query (serve/query/rerankers.py)")  # fmt: skip
    parser.add_argument(
        "--judge-only",
        action="store_true",
        help="only the --judge-on variants (named, not 'best'), with the judge",
    )
    parser.add_argument("--full", action="store_true",
                        help="search every summary of the language (about 10,000 in English), "
                        "not the 2,000-article sample: the answering article among more "
                        "distractors")  # fmt: skip
    parser.add_argument(
        "--judge-on", default="dense,best",
        help="variants the judge reranks: names from the table, 'best' being the fusion "
        "weight chosen on dev (e.g. 'dense,hybrid weighted 0.4')",
    )  # fmt: skip
    args = parser.parse_args()
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    service = IndexService(config.index, config.data_dir).start()
    judge_folder = fetch(JUDGE, ROOT / "data")
    assert judge_folder == models_dir(ROOT / "data") / JUDGE
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; config {args.config}")
    for language in args.languages.split(","):
        every = [q for q in load_questions(HERE / f"human-{language}.jsonl") if q.relevant]
        tenant = f"wiki-{language}"
        if args.full:
            tenant, every = build_full_tenant(service, language, every)
        else:
            build_tenant(service, language)
        halves = {name: [q for q in every if q.split == name] for name in ("dev", "test")}
        print(f"\n### {language}: {len(halves['dev'])} dev + {len(halves['test'])} test "
              "human-written questions\n")  # fmt: skip
        print("| retrieval | " + " | ".join(f"dev {m}" for m in METRICS) + " | "
              + " | ".join(f"test {m}" for m in METRICS) + " |")  # fmt: skip
        print("|---|" + "---|" * 2 * len(METRICS))
        variants = {"dense": QueryConfig(mode="dense"), "lexical": QueryConfig(mode="lexical"),
                    "hybrid rrf": QueryConfig(fusion="rrf")}  # fmt: skip
        variants |= {f"hybrid weighted {w}": QueryConfig(dense_weight=w) for w in WEIGHTS}
        dev_mrr, best = {}, None
        for name, variant in variants.items():
            if args.judge_only:
                break
            dev, test = [await measure(service, tenant, variant, halves[h]) for h in halves]
            dev_mrr[name] = dev["mrr@10"]
            print(f"| {name} | {cells(dev)} | {cells(test)} |", flush=True)
        if dev_mrr:
            best = max((n for n in variants if n.startswith("hybrid weighted")), key=dev_mrr.get)
            print(f"\nbest fusion on dev: {best}\n")
        judged = [best if b == "best" else b for b in args.judge_on.split(",")]
        for base, max_tokens, window in itertools.product(
            judged, map(int, args.max_tokens.split(",")), args.windows.split(",")
        ):
            judge = OnnxCrossEncoderReranker(str(judge_folder), "cpu", max_tokens=max_tokens,
                                             window=window)  # fmt: skip
            judge = TimedReranker(judge.start())
            rerank = RerankConfig(backend="cross-encoder", model=str(judge_folder),
                                  candidates=args.candidates)  # fmt: skip
            variant = variants[base].model_copy(update={"rerank": rerank})
            dev, test = [await measure(service, tenant, variant, halves[h], judge)
                         for h in halves]  # fmt: skip
            p50 = statistics.median(judge.seconds)
            print(f"| {base} + judge ({args.candidates} candidates, {max_tokens} tokens, "
                  f"window {window}; p50 {p50:.2f} s) | {cells(dev)} | {cells(test)} |",
                  flush=True)  # fmt: skip
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
