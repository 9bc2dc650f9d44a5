"""Tables as the model and the judge read them: each row one line that names its values.

A table chunk holds several rows (index/loaders/tables.py): a Markdown table that repeats its
header, or sheet rows that already name their columns ("Model: GX-42; Capacity (kg): 82.").
Shown a Markdown table, a small model quotes its header line, which holds no answer; and a
cross-encoder scores the whole chunk against "what is the price of GX-61?" low, because one
row in ten is about the question. So every prompt shows a Markdown table as named rows
(``as_named_rows``: prompt.source_text), a quote is verified against that same text, and the
judge also scores each row alone (``row_views``: rerank.rerank). Where it did, the prompt
shows a table passage's ROWS_SHOWN best rows only: next to twenty rows that look alike, a
small model quotes the row above or below the one asked about.
"""

from __future__ import annotations

import re

_MARKDOWN_ROW = re.compile(r"^\|(.*)\|$")
_SEPARATOR = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")
# A row that names its values: "Name: value; Name: value." (two pairs at least).
_NAMED_ROW = re.compile(r"^[^:;\n]{1,80}: [^;\n]*(?:; [^:;\n]{1,80}: [^;\n]*)+\.$")


def _cells(line: str) -> list[str]:
    inner = _MARKDOWN_ROW.match(line.strip())
    parts = re.split(r"(?<!\\)\|", inner.group(1)) if inner else []
    return [part.strip().replace("\\|", "|") for part in parts]


def _named(header: list[str], cells: list[str]) -> str:
    pairs = [f"{name}: {value}" for name, value in zip(header, cells, strict=False) if value]
    return "; ".join(pairs) + "." if pairs else ""


def as_named_rows(text: str, keep: tuple[str, ...] | None = None) -> str:
    """``text`` with each Markdown table (a header line, its separator, rows) written as one
    line per row naming its values: "Model: GX-61; Price (EUR): 2,432."; other lines as they
    are, so that a text without a table is returned unchanged. ``keep``: of the rows, only
    these (the rows the judge chose: ``best_rows``); None: every row."""
    lines = text.split("\n")
    out: list[str] = []
    header: list[str] | None = None
    for number, line in enumerate(lines):
        stripped = line.strip()
        if _SEPARATOR.match(stripped) and number > 0 and _MARKDOWN_ROW.match(lines[number - 1]):
            header = _cells(lines[number - 1])
            out.pop()  # the header line: every row now says it
        elif header and _MARKDOWN_ROW.match(stripped):
            if (named := _named(header, _cells(stripped))) and (keep is None or named in keep):
                out.append(named)
        else:
            header = None
            if keep is None or not _NAMED_ROW.match(stripped) or stripped in keep:
                out.append(line)
    return "\n".join(out)


ROWS_SHOWN = 3  # of a table passage, the rows the prompt shows at most: the judge's best
# A row scored this far below the best row of the question's passages is not shown, and a table
# passage whose best row is that far below is not a source: rows that look like the one asked
# (GX-41 and GX-43 for GX-42, Supplier 12 for 13) score 1 to 3 lower, and a small model quotes
# them. 2.0 left GX-46 beside GX-42 and the model answered "not found"; 1.0 was kept, on the
# development facts (benchmarks/results/office-documents.md).
ROW_MARGIN = 1.0


def best_rows(scored: list[list[tuple[str, float]]]) -> list[tuple[str, ...] | None]:
    """Per passage, from its (row, judge score) pairs: the rows the prompt shows, best first
    (at most ROWS_SHOWN, none under the best row of all passages less ROW_MARGIN); None for a
    passage without rows (its whole text is shown)."""
    top = max((score for rows in scored for _, score in rows), default=0.0)
    return [
        tuple(row for row, score in sorted(rows, key=lambda pair: -pair[1])[:ROWS_SHOWN]
              if score >= top - ROW_MARGIN) if rows else None
        for rows in scored
    ]  # fmt: skip


def row_views(text: str) -> list[str]:
    """Each table row of ``text`` alone, naming its values (Markdown tables and named rows);
    none for a passage without a table."""
    lines = (line.strip() for line in as_named_rows(text).split("\n"))
    return [line for line in lines if _NAMED_ROW.match(line)]
