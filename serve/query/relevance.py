"""The relevance a client sees: one number in [0, 1] per passage, higher is more relevant.

OpenAI's API bounds a search result's ``score`` to [0, 1] (vector-store search, the Responses
file_search results) and ``ranking_options.score_threshold`` with it. Grounded's raw scores are
on other scales, so each is mapped by a fixed, monotonic function of the score that ranked the
passage:

- the cross-encoder judge's logit: the logistic function, 1 / (1 + e^-logit), the activation
  sentence-transformers' ``CrossEncoder`` itself applies to a one-label model (a logit of 0 is
  0.5; the shipped English gate, 2.661, is 0.935);
- the generator judge's P(yes): already a probability, unchanged;
- without a judge, the dense cosine similarity, clamped at 0 (vectors are L2-normalised, so it
  is at most 1); a passage found by lexical search only: its negated BM25 ``b`` (at least 0) as
  b / (1 + b).

The raw value stays in Grounded's extension (``grounded.citations[].score`` in chat).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from index.types import SearchHit


def relevance(hit: SearchHit, judge_gives_probability: bool = False) -> float:
    """``hit``'s score in [0, 1] (module docstring); ``judge_gives_probability``: the
    reranker's score is a probability (the generator judge), not a logit."""
    if hit.rerank_score is not None:
        if judge_gives_probability:
            return min(1.0, max(0.0, hit.rerank_score))
        return _logistic(hit.rerank_score)
    if hit.dense_score is not None:
        return min(1.0, max(0.0, hit.dense_score))
    if hit.bm25_score is not None:
        bm25 = max(0.0, hit.bm25_score)
        return bm25 / (1.0 + bm25)
    return 0.0


def _logistic(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)  # no overflow for a very negative logit
    return z / (1.0 + z)


def scored(
    hits: Sequence[SearchHit], floor: float | None, judge_gives_probability: bool = False
) -> list[SearchHit]:
    """``hits`` with their ``relevance`` set, those under ``floor`` (the request's
    ``score_threshold``) left out."""
    shown = [replace(h, relevance=relevance(h, judge_gives_probability)) for h in hits]
    return [h for h in shown if floor is None or h.relevance >= floor]
