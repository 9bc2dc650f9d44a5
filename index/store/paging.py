"""OpenAI's cursor pagination (``limit``, ``order``, ``after``, ``before``) over SQLite rowids.

Lists are in creation order, which a table's rowid gives even when many rows share the same
``created_at`` second. ``after=X`` returns the items that follow X in the requested order,
``before=X`` the items just before it (the previous page), still in the requested order; with
both, the items between them, from ``after`` on. ``has_more`` says whether more items lie beyond
the page in the direction of travel: further on for ``after`` (and no cursor), further back for
``before``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from index.errors import InvalidRequestError

T = TypeVar("T")
MAX_LIMIT = 100
EMPTY = ""  # first_id and last_id of an empty page


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page: ``data`` in the requested order, with OpenAI's list fields. OpenAI's spec
    makes ``first_id`` and ``last_id`` required strings: an empty page has "" (``EMPTY``),
    which a cursor parameter reads as no cursor."""

    data: tuple[T, ...]
    first_id: str
    last_id: str
    has_more: bool

    @classmethod
    def of(cls, scanned: Sequence[T], limit: int, backwards: bool) -> Page[T]:
        """From up to ``limit + 1`` items in scan order (the extra one only tells has_more)."""
        items = list(scanned[:limit])
        if backwards:
            items.reverse()
        ids = [item.id for item in items]
        return cls(tuple(items), ids[0] if ids else EMPTY, ids[-1] if ids else EMPTY,
                   len(scanned) > limit)  # fmt: skip


def validate_page(limit: int, order: str, max_limit: int = MAX_LIMIT) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
        raise InvalidRequestError(f"limit must be 1 to {max_limit}, not {limit!r}", param="limit")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', not {order!r}", param="order")


def page_window(
    column: str, order: str, after: int | None, before: int | None
) -> tuple[str, list[int], str, bool]:
    """SQL condition, its parameters, the scan direction and whether the scan runs backwards
    (against ``order``, for a ``before`` page, whose items are reversed afterwards)."""
    ascending = order == "asc"
    conditions, params = ["1=1"], []
    if after is not None:
        conditions.append(f"{column} {'>' if ascending else '<'} ?")
        params.append(after)
    if before is not None:
        conditions.append(f"{column} {'<' if ascending else '>'} ?")
        params.append(before)
    backwards = before is not None and after is None
    scan = "ASC" if ascending != backwards else "DESC"
    return " AND ".join(conditions), params, scan, backwards


def cursor_rowid(
    db: sqlite3.Connection, sql: str, params: tuple, param: str, cursor: str | None
) -> int | None:
    """The rowid of the ``after``/``before`` item (``sql`` finds it in this list); an id that
    is not in the list is a 400, not an empty page."""
    if cursor is None or cursor == EMPTY:
        return None
    row = db.execute(sql, params).fetchone()
    if row is None:
        raise InvalidRequestError(
            f"{param}={cursor!r} is not an id in this list: pass the first_id or last_id of a "
            "page you were given, or leave it out to start from the beginning",
            param=param,
        )
    return row[0]
