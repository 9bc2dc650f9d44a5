"""Ingestion throughput: the whole pipeline against bare sentence-transformers encode.

    .venv/bin/python -m benchmarks.ingest_throughput [--docs 1000] [--rounds 3] [--model M]

``--model`` is any embedder ``index.embedder.model`` takes (default all-MiniLM-L6-v2; e.g.
data/models/multilingual-e5-small after `grounded models fetch multilingual-e5-small`). The
process's resident memory is reported after the model is loaded and at the end.

Writes N English Wikipedia summaries as text files, ingests them into a fresh tenant with the
real pipeline (read, validate, chunk with the MiniLM tokenizer, embed, SQLite + FTS5 + FAISS
with fsynced commits), and encodes the same chunk texts with a plain SentenceTransformer in
the same process. Rounds alternate between the two; the best round of each is compared.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psutil
from sentence_transformers import SentenceTransformer

from benchmarks.wiki import articles
from index.config import EmbedderConfig, IndexConfig
from index.pipeline import discover
from index.service import IndexService


def write_corpus(folder: Path, count: int) -> None:
    for number, article in enumerate(articles("en")[:count]):
        name = re.sub(r"[^\w-]+", "_", article["title"])[:80]
        text = f"{article['title']}\n\n{article['extract']}\n"
        (folder / f"{number:05d}-{name}.txt").write_text(text, encoding="utf-8")


def run_pipeline(corpus: Path, data_dir: Path, config: IndexConfig, embedder) -> tuple[float, int]:
    service = IndexService(config, data_dir, embedder=embedder).start()
    files, _ = discover([corpus])
    started = time.perf_counter()
    results = list(service.pipeline("bench").ingest(files))
    elapsed = time.perf_counter() - started
    service.close()
    assert all(r.status == "added" for r in results), "every document must be added"
    return elapsed, sum(r.chunks for r in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    args = parser.parse_args()

    config = IndexConfig(embedder=EmbedderConfig(model=args.model, device="cpu", dtype="float32"))
    rss = {}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        write_corpus(corpus, args.docs)
        service = IndexService(config, Path(tmp) / "warm").start()  # loads the model once
        embedder = service.embedder
        rss["model loaded"] = psutil.Process().memory_info().rss
        bare = SentenceTransformer(str(embedder.path), device="cpu", local_files_only=True)

        # Chunk texts exactly as the pipeline stores them, for the bare encode.
        elapsed, chunks = run_pipeline(corpus, Path(tmp) / "r0", config, embedder)
        reader = IndexService(config, Path(tmp) / "r0", embedder=embedder).start()
        texts = [  # with the document prompt, as the embedder encodes them (e5: "passage: ")
            embedder.document_prompt + chunk.text
            for doc_id, _, document in reader.shard("bench").iter_documents()
            for chunk in reader.chunker.chunk(document, tenant="bench", doc_id=doc_id, version=1)
        ]
        reader.close()
        bare.encode(texts[:256], batch_size=config.embedder.batch_size)  # warm-up

        pipeline_times, bare_times = [], []
        for round_ in range(1, args.rounds + 1):
            started = time.perf_counter()
            bare.encode(texts, batch_size=config.embedder.batch_size, normalize_embeddings=True)
            bare_times.append(time.perf_counter() - started)
            elapsed, chunks = run_pipeline(corpus, Path(tmp) / f"r{round_}", config, embedder)
            pipeline_times.append(elapsed)
            print(f"round {round_}: pipeline {elapsed:.2f}s, bare encode {bare_times[-1]:.2f}s")
        rss["end"] = psutil.Process().memory_info().rss

    pipeline_rate = chunks / min(pipeline_times)
    bare_rate = len(texts) / min(bare_times)
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs; torch threads default")
    print(f"model: {embedder.model_id}; documents: {args.docs}, chunks: {chunks}")
    print("resident memory: " + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in rss.items()))
    print("| path | chunks/s (best of rounds) |")
    print("|---|---|")
    print(f"| bare SentenceTransformer.encode | {bare_rate:.1f} |")
    print(f"| Grounded ingest pipeline | {pipeline_rate:.1f} |")
    print(f"| ratio pipeline / bare | {pipeline_rate / bare_rate:.2f} |")


if __name__ == "__main__":
    main()
