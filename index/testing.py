"""Deterministic fakes for tests where retrieval quality does not matter (no model loads)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+|[^\w\s]")


class WhitespaceTokenizer:
    """One token per word or punctuation mark."""

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]


class HashingEmbedder:
    """Bag of hashed lowercase words, L2-normalised: texts sharing words score higher."""

    def __init__(self, dimension: int = 64, model_id: str = "fake/hashing") -> None:
        self.dimension = dimension
        self.model_id = model_id
        self.max_seq_length = 256
        self.max_tokens = 254
        self.tokenizer = WhitespaceTokenizer()

    def start(self) -> HashingEmbedder:
        return self

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest, "little") % self.dimension] += 1.0
            out[row, -1] += 1e-3  # no zero vectors
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)
