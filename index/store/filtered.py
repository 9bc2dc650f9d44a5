"""Dense search restricted to some documents of a shard (access lists, a client's filter): the
same top k as a search of their chunks alone, the cheapest way (benchmarks/results/access.md)."""

from __future__ import annotations

import sqlite3

import numpy as np

from index.store.rows import chunk_count, chunk_ids_of, chunks_of, exact_within
from index.store.vectors import VectorIndex

# A search restricted to some documents asks the vector index for k more results than there
# are chunks outside them, up to this many (FAISS's GPU search returns at most 2,048).
OVERFETCH_LIMIT = 2_000
# An IVF index searched among allowed ids only: at least this share of the shard, so that the
# probed lists hold enough of them (recall@10 0.852 at 1 %, 1.000 from 5 %).
SELECTOR_MIN_SHARE = 0.1


def pairs(scores: np.ndarray, ids: np.ndarray) -> list[tuple[int, float]]:
    """(id, score) of a one-query FAISS result, without its empty slots (id -1)."""
    return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]


def search_within(
    db: sqlite3.Connection, vectors: VectorIndex, vector: np.ndarray, doc_ids: list[str], k: int
) -> list[tuple[int, float]]:
    """(chunk row id, cosine) of the top ``k`` chunks of these documents. Few chunks outside
    them (a few restricted documents): the index is asked for ``k`` more than there are such
    chunks and those are dropped. Otherwise the index skips the others while it scans (a FAISS
    IDSelector of the allowed ids): exact on a flat index; on IVF only from
    SELECTOR_MIN_SHARE of the shard. Fewer are scored exactly, read from SQLite."""
    if not doc_ids:  # the asker may read none of the shard
        return []
    inside = chunk_count(db, doc_ids)
    outside = vectors.ntotal - inside
    if outside <= min(OVERFETCH_LIMIT, vectors.ntotal // 2):
        scores, ids = vectors.search(vector, k + max(outside, 0))
        scored = pairs(scores, ids)
        allowed = chunks_of(db, [i for i, _ in scored], set(doc_ids))
        return [(i, s) for i, s in scored if i in allowed][:k]
    if vectors.kind == "exact" or inside >= SELECTOR_MIN_SHARE * vectors.ntotal:
        scores, ids = vectors.search_among(vector, k, chunk_ids_of(db, doc_ids))
        return pairs(scores, ids)
    return exact_within(db, vector[0], doc_ids, k)
