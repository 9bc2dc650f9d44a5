"""Fusing dense and lexical candidate lists into one ranking."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from index.types import SearchHit

RRF_K = 60  # the constant from Cormack et al. (2009); damps the weight of the very top ranks


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[SearchHit]], k: int = RRF_K
) -> list[tuple[SearchHit, float]]:
    """Score each chunk by sum(1 / (k + rank)) over the rankings it appears in.

    The returned hits carry every score they had in any ranking (dense and BM25).
    """
    fused: dict[str, tuple[SearchHit, float]] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            previous, score = fused.get(hit.chunk_id, (hit, 0.0))
            merged = replace(
                previous,
                dense_score=previous.dense_score if hit.dense_score is None else hit.dense_score,
                bm25_score=previous.bm25_score if hit.bm25_score is None else hit.bm25_score,
            )
            fused[hit.chunk_id] = (merged, score + 1.0 / (k + rank))
    return sorted(fused.values(), key=lambda item: -item[1])
