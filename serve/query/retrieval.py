"""Candidate retrieval from one tenant's shard: dense, lexical, or both fused."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from index.access import Reader
from index.embedding import QueryEmbedder
from index.errors import EmbedderChangedError
from index.store.shard import TenantShard
from index.types import SearchHit
from serve.query.fusion import reciprocal_rank_fusion, weighted_fusion

if TYPE_CHECKING:
    from index.service import IndexService

SearchMode = Literal["dense", "lexical", "hybrid"]
Fusion = Literal["rrf", "weighted"]
SEARCH_MODES: tuple[SearchMode, ...] = ("dense", "lexical", "hybrid")
HYBRID_POOL = 20  # candidates taken from each side before fusing
NEAR_DUPLICATE = 0.9  # word-trigram Jaccard similarity above which a lower hit is dropped


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Narrows a search to documents matching every given condition (None = no condition).
    ``readable_by``: the asker (index/access.py); only the documents it may read are
    searched, before anything is ranked. The appliance's shards always set it (serve/
    shard_host.py); None, in-process only: every document (the operator's own commands)."""

    doc_ids: tuple[str, ...] | None = None
    file_names: tuple[str, ...] | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    readable_by: Reader | None = None

    @property
    def empty(self) -> bool:
        return self.doc_ids is None and self.file_names is None and not self.attributes


def searched_doc_ids(shard: TenantShard, search_filter: SearchFilter | None) -> list[str] | None:
    """The documents a search may return (None: all of the shard's): those the filter's
    conditions match, of those its asker may read."""
    if search_filter is None:
        return None
    doc_ids = None
    if not search_filter.empty:
        doc_ids = shard.matching_doc_ids(
            search_filter.doc_ids, search_filter.file_names, search_filter.attributes
        )
    reader = search_filter.readable_by
    visible = None if reader is None else shard.visible_doc_ids(reader)
    if visible is None:
        return doc_ids
    if doc_ids is None:
        return visible
    readable = set(visible)
    return [d for d in doc_ids if d in readable]


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + 3]) for i in range(max(1, len(words) - 2))}


def drop_near_duplicates(
    ranked: list[tuple[SearchHit, float]], threshold: float = NEAR_DUPLICATE
) -> list[tuple[SearchHit, float]]:
    """Keep the best-ranked of chunks whose texts are near-identical (copied paragraphs, the
    same page in two versions of a file)."""
    kept: list[tuple[SearchHit, float, set]] = []
    for hit, score in ranked:
        grams = _trigrams(hit.text)
        if all(len(grams & g) / len(grams | g) < threshold for _, _, g in kept):
            kept.append((hit, score, grams))
    return [(hit, score) for hit, score, _ in kept]


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
    search_filter: SearchFilter | None = None,
    score_threshold: float | None = None,
) -> list[tuple[SearchHit, float]]:
    """Top-``k`` (hit, score): cosine for dense, negated BM25 for lexical, and for hybrid the
    RRF or weighted score over ``pool`` candidates from each side. Near-duplicates are dropped;
    ``score_threshold`` applies to the returned score."""
    pool = max(k, pool) if mode == "hybrid" else 2 * k  # room for dropped near-duplicates
    dense: list[SearchHit] = []
    lexical: list[SearchHit] = []
    vector = embedder.embed_queries([query]) if mode in ("dense", "hybrid") else None
    with shard.reading():  # an access list changed meanwhile applies to both searches
        doc_ids = searched_doc_ids(shard, search_filter)
        if vector is not None:
            model_id = getattr(embedder, "model_id", None)
            dense = shard.search_dense(vector, pool, doc_ids, model_id)
        if mode in ("lexical", "hybrid"):
            lexical = shard.search_lexical(query, pool, doc_ids)
    if mode == "dense":
        ranked = [(hit, hit.dense_score) for hit in dense]
    elif mode == "lexical":
        ranked = [(hit, hit.bm25_score) for hit in lexical]
    elif fusion == "weighted":
        ranked = weighted_fusion(dense, lexical, dense_weight)
    else:
        ranked = reciprocal_rank_fusion([dense, lexical])
    if score_threshold is not None:
        ranked = [(hit, score) for hit, score in ranked if score >= score_threshold]
    return drop_near_duplicates(ranked)[:k]


@dataclass(frozen=True, slots=True)
class SearchParams:
    """How one search runs (``retrieve``'s keyword arguments)."""

    mode: SearchMode = "hybrid"
    fusion: Fusion = "weighted"
    dense_weight: float = 0.4
    pool: int = HYBRID_POOL
    search_filter: SearchFilter | None = None
    score_threshold: float | None = None


class Searcher(Protocol):
    """Where the query pipeline's candidates come from: the tenant's shard, in-process
    (LocalSearcher) or behind the appliance's embedder and shard deployments."""

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]: ...


def search_shard(
    shard: TenantShard, embedder: QueryEmbedder, query: str, k: int, params: SearchParams
) -> list[tuple[SearchHit, float]]:
    return retrieve(
        shard, embedder, query, k, params.mode, fusion=params.fusion,
        dense_weight=params.dense_weight, pool=params.pool,
        search_filter=params.search_filter, score_threshold=params.score_threshold,
    )  # fmt: skip


class LocalSearcher:
    """Searches an IndexService's shards in this process."""

    def __init__(self, index: IndexService) -> None:
        self.index = index

    async def search(
        self, tenant: str, query: str, k: int, params: SearchParams
    ) -> list[tuple[SearchHit, float]]:
        return search_tenant(self.index, tenant, query, k, params)


def search_tenant(
    index: IndexService, tenant: str, query: str, k: int, params: SearchParams
) -> list[tuple[SearchHit, float]]:
    """Search a tenant's shard with the embedder that built it, embedding again when a
    reindex moves the shard to another model between the two."""
    shard = index.shard(tenant)

    def once() -> list[tuple[SearchHit, float]]:
        tuned = for_embedder(params, index.dense_weight(shard))
        return search_shard(shard, index.query_embedder(shard), query, k, tuned)

    for _ in range(2):
        try:
            return once()
        except EmbedderChangedError:
            pass  # moved between choosing the embedder and searching: choose again
    return once()


def for_embedder(params: SearchParams, dense_weight: float | None) -> SearchParams:
    """``params`` with the dense weight configured for the shard's embedder, if any."""
    return params if dense_weight is None else replace(params, dense_weight=dense_weight)


class PrecomputedQuery:
    """A QueryEmbedder that returns a vector computed elsewhere (the embedder deployment)
    with ``model_id``, the model it came from."""

    def __init__(self, vector, model_id: str | None = None) -> None:
        self.vector, self.model_id = vector, model_id

    def embed_queries(self, texts):
        import numpy as np

        return np.asarray(self.vector, dtype=np.float32).reshape(1, -1)
