"""Exact FAISS search latency by shard size on this CPU: why shards under
``vectors.gpu_min_vectors`` stay on the CPU even with ``device: cuda``.

    .venv/bin/python -m benchmarks.exact_search_latency

Random unit vectors of MiniLM's dimension (384), an exact index (``ivf_threshold`` out of
reach), top 50, one query at a time: p50 of 50 queries per size.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from index.config import VectorIndexConfig
from index.store.vectors import VectorIndex


def main() -> None:
    rng = np.random.default_rng(0)
    for count in (1_000, 5_000, 20_000, 50_000):
        vectors = rng.standard_normal((count, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index = VectorIndex.build(
            384, VectorIndexConfig(ivf_threshold=10**9), np.arange(count), vectors
        )
        index.search(vectors[:1] + 0.01, 50)  # warm-up
        timings = []
        for row in range(50):
            began = time.perf_counter()
            index.search(vectors[row : row + 1] + 0.01, 50)
            timings.append(time.perf_counter() - began)
        print(f"{count:>7,} vectors: exact search p50 {statistics.median(timings) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
