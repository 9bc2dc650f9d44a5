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


def _normalised(scores: Sequence[float]) -> list[float]:
    """Min-max to [0, 1]; a list of equal scores (or of one) maps to 1."""
    low, high = min(scores), max(scores)
    return [1.0 if high == low else (s - low) / (high - low) for s in scores]


def weighted_fusion(
    dense: Sequence[SearchHit], lexical: Sequence[SearchHit], dense_weight: float = 0.5
) -> list[tuple[SearchHit, float]]:
    """Convex combination of min-max normalised dense and BM25 scores (absent side = 0)."""
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be within [0, 1], got {dense_weight}")
    fused: dict[str, tuple[SearchHit, float]] = {}
    sides = ((dense, "dense_score", dense_weight), (lexical, "bm25_score", 1.0 - dense_weight))
    for hits, attribute, weight in sides:
        if not hits:
            continue
        for hit, score in zip(
            hits, _normalised([getattr(h, attribute) for h in hits]), strict=True
        ):
            previous, total = fused.get(hit.chunk_id, (hit, 0.0))
            merged = replace(previous, **{attribute: getattr(hit, attribute)})
            fused[hit.chunk_id] = (merged, total + weight * score)
    return sorted(fused.values(), key=lambda item: -item[1])
