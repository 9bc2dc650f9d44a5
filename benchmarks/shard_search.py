"""Vector search on real embeddings: IVF against exact search, in the same run.

    .venv/bin/python -m benchmarks.shard_search [--vectors 100000] [--queries 1000]

Embeds distinct sentences (then two-sentence windows) of the English, French and Spanish
Wikipedia summaries with MiniLM
(cached under benchmarks/.cache), builds Grounded's VectorIndex both ways (exact
IndexIDMap2/FlatIP, and the IVF it switches to past ivf_threshold), and asks English
title-and-description questions one at a time. recall@10 is measured against exact search.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from benchmarks.wiki import articles, passages
from index.config import EmbedderConfig, VectorIndexConfig
from index.embedding import SentenceTransformerEmbedder
from index.store.vectors import VectorIndex, ivf_nlist

CACHE = Path(__file__).parent / ".cache"


def embedded_sentences(count: int, embedder: SentenceTransformerEmbedder) -> np.ndarray:
    path = CACHE / f"passages-{count}.npy"
    if path.exists():
        return np.load(path)
    texts = passages()[:count]
    if len(texts) < count:
        raise SystemExit(f"only {len(texts)} distinct sentences available, asked for {count}")
    started = time.perf_counter()
    vectors = embedder.embed_documents(texts)
    print(f"embedded {count} passages in {time.perf_counter() - started:.0f}s (cached)")
    CACHE.mkdir(exist_ok=True)
    np.save(path, vectors)
    return vectors


def timed_search(index: VectorIndex, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """One query per call, as requests arrive; returns ids and queries per second."""
    ids = np.empty((len(queries), k), dtype=np.int64)
    started = time.perf_counter()
    for row in range(len(queries)):
        ids[row] = index.search(queries[row : row + 1], k)[1][0]
    return ids, len(queries) / (time.perf_counter() - started)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()

    embedder = SentenceTransformerEmbedder(EmbedderConfig(device="cpu")).start()
    vectors = embedded_sentences(args.vectors, embedder)
    questions = [f"{a['title']}: {a['description']}" for a in articles("en")[: args.queries]]
    queries = embedder.embed_queries(questions)
    ids = np.arange(len(vectors), dtype=np.int64)
    dimension = vectors.shape[1]

    exact = VectorIndex.build(dimension, VectorIndexConfig(ivf_threshold=10**9), ids, vectors)
    started = time.perf_counter()
    ivf = VectorIndex.build(dimension, VectorIndexConfig(ivf_threshold=1000), ids, vectors)
    train_seconds = time.perf_counter() - started
    truth, exact_qps = timed_search(exact, queries, args.k)

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"vectors: {len(vectors)} x {dimension} (MiniLM, Wikipedia passages EN/FR/ES)")
    print(f"queries: {len(queries)} English 'title: description' questions, one per call")
    print(f"IVF: {ivf.kind} (nlist {ivf_nlist(len(vectors))}), built in {train_seconds:.1f}s\n")
    print(f"| index | nprobe | recall@{args.k} | QPS | speed-up vs exact |")
    print("|---|---|---|---|---|")
    print(f"| exact (FlatIP) | - | 1.000 | {exact_qps:.0f} | 1.0x |")
    for nprobe in (4, 8, 16, 32, 64):
        searcher = VectorIndex(dimension, VectorIndexConfig(nprobe=nprobe), ivf._index)
        found, qps = timed_search(searcher, queries, args.k)
        print(f"| {ivf.kind} | {nprobe} | {recall_at(found, truth):.3f} | {qps:.0f} | "
              f"{qps / exact_qps:.1f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
