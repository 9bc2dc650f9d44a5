"""The Reranker deployment (query.rerank.backend: cross-encoder) and the ingress's handle
to it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from serve.config import AppConfig

log = logging.getLogger("grounded")


class Reranker:
    """The cross-encoder reranker (query.rerank.backend: cross-encoder); CUDA when present."""

    def __init__(self, config: AppConfig) -> None:
        from serve.query.rerankers import judge

        self.reranker = judge(config.query.rerank).start()

    async def scores(self, query: str, passages: list[str], cache_salt: str = "") -> list[float]:
        return await self.reranker.scores(query, passages, cache_salt)


class RemoteReranker:
    def __init__(self, handle) -> None:
        self.handle = handle

    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        return await self.handle.scores.remote(query, list(passages), cache_salt)
