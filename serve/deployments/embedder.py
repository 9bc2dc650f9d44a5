"""The Embedder deployment: query embeddings batched across requests and cached per tenant,
document embeddings for ingestion; and HandleEmbedder, the DocumentEmbedder the Shards
replicas ingest with through it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray import serve

from index.config import DEFAULT_EMBEDDER
from index.service import Embedders
from serve.config import AppConfig
from serve.deployments.query_cache import QueryEmbeddingCache
from serve.metrics import metrics

log = logging.getLogger("grounded")


class Embedder:
    """Query embeddings batched across concurrent requests, with an LRU cache keyed by tenant,
    model id and whitespace-normalised text; document embeddings for ingestion. Hosts every
    configured embedder (index.embedders), each loaded on first use; a call names its model
    by the model id a shard records (None: the default embedder)."""

    def __init__(self, config: AppConfig, embedders: Embedders | None = None) -> None:
        """``embedders``: the models (default: those of ``config.index``, loaded here)."""
        self.embedders = embedders or Embedders(config.index)
        self.embedders.get(DEFAULT_EMBEDDER)
        self.cache = QueryEmbeddingCache(config.serve.embed_cache_size)
        self._embed_batch.set_max_batch_size(config.serve.embed_batch_size)
        self._embed_batch.set_batch_wait_timeout_s(config.serve.embed_batch_wait_s)

    async def _model(self, model_id: str | None):
        if model_id is None:
            return self.embedders.get(DEFAULT_EMBEDDER)[0]
        return (await asyncio.to_thread(self.embedders.for_model, model_id))[0]

    async def info(self, model_id: str | None = None) -> dict[str, Any]:
        e = await self._model(model_id)
        return {"model_id": e.model_id, "dimension": e.dimension, "path": str(e.path),
                "max_tokens": e.max_tokens}  # fmt: skip

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_batch(self, requests: list[tuple[str, str]]) -> list[np.ndarray]:
        """(model id, text) pairs of concurrent requests, embedded one call per model."""
        vectors: list[np.ndarray | None] = [None] * len(requests)
        for model_id in dict.fromkeys(m for m, _ in requests):
            at = [i for i, (m, _) in enumerate(requests) if m == model_id]
            embedder = await self._model(model_id)
            texts = [requests[i][1] for i in at]
            for i, vector in zip(at, await asyncio.to_thread(embedder.embed_queries, texts),
                                 strict=True):  # fmt: skip
                vectors[i] = vector
        return vectors

    async def embed_query(self, text: str, tenant: str, model_id: str) -> np.ndarray:
        """Cached per tenant: a hit's speed would otherwise tell one tenant what another asked."""
        key = QueryEmbeddingCache.key(tenant, model_id, text)
        if (vector := self.cache.get(key)) is not None:
            metrics().embed_cache.inc(tags={"result": "hit"})
            return vector
        metrics().embed_cache.inc(tags={"result": "miss"})
        # Resolved (and loaded) before joining a batch: a model no embedder provides is refused
        # for this request alone, not for every query batched with it.
        await self._model(model_id)
        vector = await self._embed_batch((model_id, key[2]))
        self.cache.put(key, vector)
        return vector

    async def embed_documents(self, texts: list[str], model_id: str | None = None) -> np.ndarray:
        embedder = await self._model(model_id)
        return await asyncio.to_thread(embedder.embed_documents, texts)

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """/v1/embeddings (the default embedder): vectors and the number of input tokens."""
        embedder = await self._model(None)
        tokens = sum(embedder.tokenizer.count(t) for t in texts)
        return await asyncio.to_thread(embedder.embed_documents, texts), tokens


class HandleEmbedder:
    """A DocumentEmbedder the shard replicas ingest with: the embedder deployment does the
    work; the tokenizer (for chunking) is loaded locally from the same model folder.
    ``start()`` blocks on the deployment: call it from a thread, never the event loop."""

    def __init__(self, handle, config) -> None:
        from index.embedding import resolve_model as resolve_embedder

        self.handle = handle
        self.model_id = resolve_embedder(config.model)[0]
        self.dimension = self.max_tokens = 0
        self.tokenizer = None

    def start(self) -> HandleEmbedder:
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            from index.embedding import HFTokenCounter

            info = self.handle.info.remote(self.model_id).result()
            self.dimension, self.max_tokens = info["dimension"], info["max_tokens"]
            self.tokenizer = HFTokenCounter(AutoTokenizer.from_pretrained(info["path"]))
        return self

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        # Called from the ingest thread (never the replica's event loop), so blocking is fine.
        return self.handle.embed_documents.remote(list(texts), self.model_id).result()
