"""The rerank stage: the gated candidates rescored by the judge (serve/query/rerankers.py),
which reads question and passage together; a table passage is also scored row by row
(serve/query/rows.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from index.types import SearchHit
from serve.query.judging import Reranker
from serve.query.rows import best_rows, row_views


async def rerank(
    reranker: Reranker,
    query: str,
    hits: Sequence[SearchHit],
    top_n: int,
    cache_salt: str,
    first_part: str = "",
) -> list[SearchHit]:
    """The hits reordered by the reranker (stable for ties), at most ``top_n``, each carrying
    its ``rerank_score``. ``first_part``: the first of the two questions a compound query asks
    (serve/query/compound.py); a passage keeps the better of its scores against the query and
    that part (both in ``part_scores``), so that a passage answering only the first part is
    not outranked by the question's second half. A table passage carries the rows the prompt
    shows of it (``rows``), and one whose every row scores far under the best row of all is
    left out (serve/query/rows.py)."""
    if not hits:
        return []
    # Every passage, then each table row alone (serve/query/rows.py): a passage scores its
    # best view, and a table passage keeps its best rows for the prompt.
    views = [(i, hit.text) for i, hit in enumerate(hits)]
    views += [(i, row) for i, hit in enumerate(hits) for row in row_views(hit.text)]
    passages = [text for _, text in views]
    whole = [float(s) for s in await reranker.scores(query, passages, cache_salt)]
    part = [float(s) for s in await reranker.scores(first_part, passages, cache_salt)] if (
        first_part) else []  # fmt: skip
    view_scores = list(map(max, whole, part)) if part else whole
    rows: list[list[tuple[str, float]]] = [[] for _ in hits]
    for (i, row), score in zip(views[len(hits) :], view_scores[len(hits) :], strict=True):
        rows[i].append((row, score))
    whole, part = _best_per_hit(views, whole), _best_per_hit(views, part)
    scores = list(map(max, whole, part)) if part else whole
    order = sorted(range(len(hits)), key=lambda i: -scores[i])
    kept = order[:top_n]
    shown = best_rows([rows[i] for i in kept])
    return [replace(hits[i], rerank_score=scores[i], rows=shown[n],
                    part_scores=(whole[i], part[i]) if part else ())
            for n, i in enumerate(kept) if shown[n] != ()]  # fmt: skip


def _best_per_hit(views: list[tuple[int, str]], scores: list[float]) -> list[float]:
    """Each hit's best score over its views (an empty list for no scores)."""
    best: dict[int, float] = {}
    for (i, _), score in zip(views, scores, strict=False):
        best[i] = max(best.get(i, -math.inf), score)
    return [best[i] for i in sorted(best)]
