"""Retrieval and answer metrics, as pure functions over one question's results.

Relevance is binary and judged per document (a file name or a document id): a ranking of chunks
is first reduced to the documents in order of their first chunk.
"""

from __future__ import annotations

import math
import statistics
import unicodedata
from collections.abc import Iterable, Sequence


def first_occurrences(items: Iterable[str]) -> list[str]:
    """Documents in order of first appearance (a document's later chunks do not count again)."""
    return list(dict.fromkeys(items))


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def reciprocal_rank(ranked: Sequence[str], relevant: set[str], k: int = 10) -> float:
    for rank, item in enumerate(ranked[:k], start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: set[str], k: int = 10) -> float:
    dcg = sum(1.0 / math.log2(rank + 1) for rank, item in enumerate(ranked[:k], 1)
              if item in relevant)  # fmt: skip
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal if ideal else 0.0


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).split())


def answer_matches(answer: str, expected: Sequence[str]) -> bool:
    """Any expected substring appears in the answer (case, accents and spacing ignored)."""
    folded = _fold(answer)
    return any(_fold(e) in folded for e in expected if e.strip())


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def percentile(values: Iterable[float], share: float) -> float | None:
    """Nearest-rank percentile (``share`` in 0..1)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]
