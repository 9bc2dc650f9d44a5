"""Retrieval filtered by access lists (index/access.py) on a large shard: does a search by
someone who may read only a fraction of the documents find what exact search over exactly
those documents finds, and what does the filter cost?

A shard of ``--chunks`` chunks (``--per-doc`` per document, random unit vectors of dimension
384, so that nothing but the filter is measured) where a fraction of the documents is open to
the asker and the rest restricted to a group it is not in. For each fraction, ``--queries``
queries (each a perturbed stored vector, so it has true neighbours): recall@10 of the search
the API runs (``searched_doc_ids`` then ``search_dense``) against brute force over the visible
chunks, and its p50 latency against the unfiltered search of the same shard.

    .venv/bin/python -m benchmarks.access_filter [--chunks 100000] [--per-doc 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from index.access import Reader
from index.config import IndexConfig
from index.store.rows import Manifest, PreparedDocument
from index.store.shard import TenantShard
from index.types import Block, Chunk, Document
from serve.query.retrieval import SearchFilter, searched_doc_ids

DIMENSION = 384
MODEL = "bench/random"
CLUSTERS, SPREAD = 500, 0.5


def build(directory: Path, chunks: int, per_doc: int, seed: int = 7, **vectors_config):
    """The shard (``vectors_config``: index settings other than the shipped ones), every
    stored vector (row order = FAISS ids), and each chunk's document."""
    rng = np.random.default_rng(seed)
    manifest = Manifest(MODEL, DIMENSION, "bench")
    settings = IndexConfig().vectors.model_copy(update=vectors_config)
    shard = TenantShard(directory, "bench", manifest, settings).start(accept={MODEL})
    # Clustered, as text embeddings are (uniform random vectors are the worst case of an IVF
    # index, and not what a shard holds); a document's chunks come from any cluster.
    centers = rng.standard_normal((CLUSTERS, DIMENSION)).astype(np.float32)
    noise = rng.standard_normal((chunks, DIMENSION)).astype(np.float32)
    vectors = centers[rng.integers(CLUSTERS, size=chunks)] + SPREAD * noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    owners = []
    batch = []
    for d in range(chunks // per_doc):
        doc_id = f"doc-{d:06d}"
        text = " ".join(f"w{d}_{c}" for c in range(per_doc))
        document = Document(
            f"{doc_id}.txt", "text/plain", text, (Block(0, len(text), "paragraph"),)
        )
        parts, start = [], 0
        for c in range(per_doc):
            word = f"w{d}_{c}"
            parts.append(Chunk(f"{doc_id}-{c}", doc_id, 1, c, start, start + len(word), word))
            start += len(word) + 1
        rows = vectors[d * per_doc : (d + 1) * per_doc]
        batch.append(PreparedDocument(doc_id, doc_id, document, doc_id, len(text), 1, parts, rows))
        owners += [doc_id] * per_doc
        if len(batch) == 50:
            shard.write_documents(batch, MODEL)
            batch = []
    shard.write_documents(batch, MODEL)
    shard.flush()
    return shard, vectors, np.array(owners)


def row_of(chunk_id: str, per_doc: int) -> int:
    """The stored vector's row of a chunk id ``doc-<d>-<c>``."""
    _, document, chunk = chunk_id.split("-")
    return int(document) * per_doc + int(chunk)


def measure(shard, vectors, owners, fraction: float, queries: int, seed: int = 11):
    rng = np.random.default_rng(seed)
    documents = sorted(set(owners))
    visible = set(documents[: max(1, round(fraction * len(documents)))])
    with shard.transaction(write=True) as db:
        db.execute("UPDATE documents SET access = NULL")
        hidden = [d for d in documents if d not in visible]
        db.executemany("UPDATE documents SET access = ? WHERE doc_id = ?",
                       [('["group:board"]', d) for d in hidden])  # fmt: skip
    mask = np.isin(owners, list(visible))
    recalls, own, filtered_s, unfiltered_s = [], [], [], []
    asker = SearchFilter(readable_by=Reader("user:asker", frozenset({"group:staff"})))
    for _ in range(queries):
        target = vectors[rng.choice(np.flatnonzero(mask))]
        query = target + 0.05 * rng.standard_normal(DIMENSION).astype(np.float32)
        query = (query / np.linalg.norm(query))[None, :]
        started = time.perf_counter()
        doc_ids = searched_doc_ids(shard, asker)
        hits = shard.search_dense(query, 10, doc_ids)
        filtered_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        everyone = shard.search_dense(query, 10)
        unfiltered_s.append(time.perf_counter() - started)
        best = set(np.argsort(-(vectors @ query[0]))[:10])
        own.append(len({row_of(h.chunk_id, len(owners) // len(documents)) for h in everyone}
                       & best) / 10)  # fmt: skip
        assert all(h.doc_id in visible for h in hits)
        scores = vectors[mask] @ query[0]
        truth = set(np.flatnonzero(mask)[np.argsort(-scores)[:10]])
        found = {row_of(h.chunk_id, len(owners) // len(documents)) for h in hits}
        recalls.append(len(found & truth) / 10)
    return (statistics.mean(recalls), statistics.mean(own), statistics.median(filtered_s) * 1e3,
            statistics.median(unfiltered_s) * 1e3)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--per-doc", type=int, default=100)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.1, 0.5, 0.99])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        shard, vectors, owners = build(Path(folder), args.chunks, args.per_doc)
        print(f"{args.chunks:,} chunks in {len(set(owners)):,} documents, built in "
              f"{time.perf_counter() - started:.0f} s ({shard.stats().index_kind})")  # fmt: skip
        print("| visible | filtered recall@10 (vs exact over the visible) | unfiltered recall@10 "
              "(vs exact over all) | p50 filtered ms | p50 unfiltered ms | ratio |\n"
              "|---|---|---|---|---|---|")  # fmt: skip
        for fraction in args.fractions:
            recall, own, filtered, unfiltered = measure(
                shard, vectors, owners, fraction, args.queries
            )
            print(f"| {fraction:.0%} | {recall:.3f} | {own:.3f} | {filtered:.1f} "
                  f"| {unfiltered:.1f} | {filtered / unfiltered:.1f}x |")  # fmt: skip
        shard.close()


if __name__ == "__main__":
    main()
