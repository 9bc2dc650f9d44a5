"""The query-embedding cache of the Embedder deployment (plain Python, unit-tested)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class QueryEmbeddingCache:
    """Least-recently-used query embeddings keyed by tenant, embedder model id and
    whitespace-normalised text. The tenant is part of the key: a cache hit answers faster, and
    that speed must never tell one tenant what another has asked."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()

    @staticmethod
    def key(tenant: str, model_id: str, text: str) -> tuple[str, str, str]:
        return tenant, model_id, " ".join(text.split())

    def get(self, key: tuple[str, str, str]) -> np.ndarray | None:
        vector = self._entries.get(key)
        if vector is not None:
            self._entries.move_to_end(key)
        return vector

    def put(self, key: tuple[str, str, str], vector: np.ndarray) -> None:
        if not self.size:
            return
        self._entries[key] = vector
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
