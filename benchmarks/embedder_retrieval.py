"""Retrieval with each embedder, in English and French, on the development and held-out halves
of both question sets: the generated Wikipedia questions (benchmarks/eval/wiki-<lang>.jsonl)
and the human-written ones (human-<lang>.jsonl). Dense, lexical, RRF and weighted fusion; the
fusion weight is chosen on the dev half of each (embedder, language, set) and reported on
both halves.

    .venv/bin/python -m benchmarks.embedder_retrieval [--languages en,fr] [--judge]

The embedders are those of issue 17: all-MiniLM-L6-v2 (the packaged default) and
multilingual-e5-small (`grounded models fetch multilingual-e5-small`, fetched here if absent).
Every (embedder, language) is its own tenant of one data directory, chosen per tenant through
index.tenant_embedders as an operator would. ``--judge`` adds the relevance judge (20
candidates, 256 tokens) on the best fusion of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.build_eval import HERE, write_corpus
from benchmarks.human_retrieval import JUDGE, METRICS, WEIGHTS, cells, measure
from benchmarks.retrieval_quality import CACHE
from index.config import EmbedderConfig
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.models import fetch
from serve.eval.run import load_questions
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryConfig
from serve.query.rerankers import OnnxCrossEncoderReranker

ROOT = Path(__file__).resolve().parent.parent

E5 = "multilingual-e5-small"
EMBEDDERS = {"minilm": "all-MiniLM-L6-v2", "e5": E5}
SETS = {"generated": "wiki-{}.jsonl", "human": "human-{}.jsonl"}


def build(service: IndexService, tenant: str, language: str) -> None:
    files, _ = discover([write_corpus(language, CACHE / f"corpus-{language}")[0].parent])
    started = time.perf_counter()
    results = list(service.pipeline(tenant).ingest(files))
    added = sum(r.status == "added" for r in results)
    print(f"{tenant}: {len(results)} documents ({added} newly added) in "
          f"{time.perf_counter() - started:.0f}s", file=sys.stderr)  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--languages", default="en,fr")
    parser.add_argument("--embedders", default="minilm,e5")
    parser.add_argument("--judge", action="store_true", help="also rerank the best fusion")
    args = parser.parse_args()
    e5_folder = fetch(E5, ROOT / "data")
    models = {"minilm": EMBEDDERS["minilm"], "e5": str(e5_folder)}
    config = load_config(Path(args.config), data_dir=CACHE / "data")
    languages, embedders = args.languages.split(","), args.embedders.split(",")
    tenants = {(e, lang): f"wiki-{lang}" if e == "minilm" else f"wiki-{lang}-{e}"
               for e in embedders for lang in languages}  # fmt: skip
    index = config.index.model_copy(update={
        "embedders": {e: EmbedderConfig(model=models[e], device="cpu", dtype="float32")
                      for e in embedders if e != "minilm"},
        "tenant_embedders": {t: e for (e, _), t in tenants.items() if e != "minilm"},
    })  # fmt: skip
    service = IndexService(index, config.data_dir).start()
    judge = None
    if args.judge:
        folder = fetch(JUDGE, ROOT / "data")
        judge = OnnxCrossEncoderReranker(str(folder), "cpu", max_tokens=256).start()
        rerank = RerankConfig(backend="cross-encoder", model=str(folder), candidates=20)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; config {args.config}")
    header = ("| embedder | retrieval | " + " | ".join(f"dev {m}" for m in METRICS) + " | "
              + " | ".join(f"test {m}" for m in METRICS) + " |\n|---|---|"
              + "---|" * 2 * len(METRICS))  # fmt: skip
    for (_, language), tenant in tenants.items():
        build(service, tenant, language)
    for language in languages:
        for kind, pattern in SETS.items():
            every = [q for q in load_questions(HERE / pattern.format(language)) if q.relevant]
            halves = {h: [q for q in every if q.split == h] for h in ("dev", "test")}
            print(f"\n### {language}, {kind} questions: {len(halves['dev'])} dev + "
                  f"{len(halves['test'])} test\n\n{header}")  # fmt: skip
            for embedder in embedders:
                tenant = tenants[(embedder, language)]
                variants = {"dense": QueryConfig(mode="dense"),
                            "lexical": QueryConfig(mode="lexical"),
                            "hybrid rrf": QueryConfig(fusion="rrf")}  # fmt: skip
                variants |= {f"hybrid weighted {w}": QueryConfig(dense_weight=w) for w in WEIGHTS}
                dev_mrr = {}
                for name, variant in variants.items():
                    if embedder != embedders[0] and name == "lexical":
                        continue  # the same for every embedder
                    dev, test = [await measure(service, tenant, variant, halves[h])
                                 for h in halves]  # fmt: skip
                    dev_mrr[name] = dev["mrr@10"]
                    print(f"| {embedder} | {name} | {cells(dev)} | {cells(test)} |", flush=True)
                best = max((n for n in dev_mrr if n.startswith("hybrid w")), key=dev_mrr.get)
                print(f"| {embedder} | **best on dev: {best}** |" + " |" * 2 * len(METRICS))
                if judge is not None:
                    variant = variants[best].model_copy(update={"rerank": rerank})
                    dev, test = [await measure(service, tenant, variant, halves[h], judge)
                                 for h in halves]  # fmt: skip
                    print(f"| {embedder} | {best} + judge | {cells(dev)} | {cells(test)} |")
    service.close()


if __name__ == "__main__":
    asyncio.run(main())
