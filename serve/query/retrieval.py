"""Candidate retrieval from one tenant's shard: dense, lexical, or both fused."""

from __future__ import annotations

from typing import Literal

from index.embedding import QueryEmbedder
from index.store.shard import TenantShard
from index.types import SearchHit
from serve.query.fusion import reciprocal_rank_fusion, weighted_fusion

SearchMode = Literal["dense", "lexical", "hybrid"]
Fusion = Literal["rrf", "weighted"]
SEARCH_MODES: tuple[SearchMode, ...] = ("dense", "lexical", "hybrid")
HYBRID_POOL = 20  # candidates taken from each side before fusing


def retrieve(
    shard: TenantShard,
    embedder: QueryEmbedder,
    query: str,
    k: int,
    mode: SearchMode = "hybrid",
    *,
    fusion: Fusion = "rrf",
    dense_weight: float = 0.5,
    pool: int = HYBRID_POOL,
) -> list[tuple[SearchHit, float]]:
    """Top-``k`` (hit, score): cosine for dense, negated BM25 for lexical, and for hybrid the
    RRF or weighted score over ``pool`` candidates from each side."""
    pool = max(k, pool) if mode == "hybrid" else k
    dense: list[SearchHit] = []
    lexical: list[SearchHit] = []
    if mode in ("dense", "hybrid"):
        dense = shard.search_dense(embedder.embed_queries([query]), pool)
    if mode in ("lexical", "hybrid"):
        lexical = shard.search_lexical(query, pool)
    if mode == "dense":
        return [(hit, hit.dense_score) for hit in dense]
    if mode == "lexical":
        return [(hit, hit.bm25_score) for hit in lexical]
    if fusion == "weighted":
        return weighted_fusion(dense, lexical, dense_weight)[:k]
    return reciprocal_rank_fusion([dense, lexical])[:k]
