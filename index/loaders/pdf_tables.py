"""Tables on PDF pages, found by pdfplumber: ruled tables from their drawn lines, and tables
without rules from words that line up in columns over several lines.

A page's text is then read as bands: the text above a table, the table (as rows of cells),
the text below it, so that a table's cells keep their column names (index/loaders/tables.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from statistics import median

from index.text import collapse_whitespace

MIN_ROWS = 3  # lines in a row that line up before they are read as a table (header included)
MIN_COLUMNS = 2
# Two words are in different cells when the space between them is wider than this many times
# the text's height: a word space is about a quarter of it, a column gap several times it.
CELL_GAP = 1.2
ALIGN = 0.6  # column starts (or ends) agree within this many times the text's height


@dataclass(frozen=True, slots=True)
class PageTable:
    top: float
    bottom: float
    rows: list[list[str]]  # the first row is the header


def _ruled(page) -> list[PageTable]:
    tables = []
    for found in page.find_tables():
        rows = [[collapse_whitespace(c or "") for c in row] for row in found.extract()]
        rows = [row for row in rows if any(row)]
        if len(rows) >= 2 and max(len(r) for r in rows) >= MIN_COLUMNS:
            tables.append(PageTable(found.bbox[1], found.bbox[3], rows))
    return tables


def _lines(words: list[dict]) -> list[list[dict]]:
    """Words grouped into lines by their vertical position, each line left to right."""
    lines: list[list[dict]] = []
    for word in sorted(words, key=lambda w: (round(w["top"]), w["x0"])):
        if lines and abs(lines[-1][0]["top"] - word["top"]) <= 0.5 * _height(word):
            lines[-1].append(word)
        else:
            lines.append([word])
    return [sorted(line, key=lambda w: w["x0"]) for line in lines]


def _height(word: dict) -> float:
    return max(word["bottom"] - word["top"], 1.0)


def _cells(line: list[dict]) -> list[tuple[float, float, str]]:
    """(x0, x1, text) per cell: runs of words closer than CELL_GAP text heights."""
    cells: list[list[dict]] = [[line[0]]]
    for before, word in pairwise(line):
        if word["x0"] - before["x1"] > CELL_GAP * _height(word):
            cells.append([word])
        else:
            cells[-1].append(word)
    return [(c[0]["x0"], c[-1]["x1"], " ".join(w["text"] for w in c)) for c in cells]


def _aligned(a: list[tuple[float, float, str]], b: list[tuple[float, float, str]], tol: float):
    """Two lines of cells are rows of one table: as many cells, each column starting, ending or
    centred at the same place."""
    if len(a) != len(b) or len(a) < MIN_COLUMNS:
        return False
    return all(
        abs(x[0] - y[0]) <= tol
        or abs(x[1] - y[1]) <= tol
        or abs((x[0] + x[1]) - (y[0] + y[1])) <= 2 * tol
        for x, y in zip(a, b, strict=True)
    )


def _unruled(page, ruled: list[PageTable]) -> list[PageTable]:
    words = [
        w for w in page.extract_words(use_text_flow=False)
        if not any(t.top - 1 <= w["top"] <= t.bottom + 1 for t in ruled)
    ]  # fmt: skip
    if not words:
        return []
    lines = _lines(words)
    tol = ALIGN * median(_height(w) for w in words)
    tables: list[PageTable] = []
    run: list[int] = []

    def close() -> None:
        if len(run) >= MIN_ROWS:
            rows = [[collapse_whitespace(c[2]) for c in _cells(lines[i])] for i in run]
            top = min(w["top"] for w in lines[run[0]])
            tables.append(PageTable(top, max(w["bottom"] for w in lines[run[-1]]), rows))

    for index, line in enumerate(lines):
        cells = _cells(line)
        if run and _aligned(_cells(lines[run[-1]]), cells, tol):
            run.append(index)
            continue
        close()
        run = [index] if len(cells) >= MIN_COLUMNS else []
    close()
    return tables


def find_tables(page) -> list[PageTable]:
    """The tables of a pdfplumber page, top to bottom."""
    ruled = _ruled(page)
    return sorted([*ruled, *_unruled(page, ruled)], key=lambda t: t.top)


def bands(page) -> list[str | PageTable]:
    """The page top to bottom: the text between tables, and the tables."""
    pieces: list[str | PageTable] = []
    top = 0.0
    for table in find_tables(page):
        if table.top > top:
            pieces.append(_text(page, top, table.top))
        pieces.append(table)
        top = max(top, table.bottom)
    if top < page.height:
        pieces.append(_text(page, top, page.height))
    return pieces


def _text(page, top: float, bottom: float) -> str:
    """The text wholly inside a band of the page (a table's edge rows are not in it)."""
    return page.within_bbox((0, top, page.width, bottom)).extract_text() or ""
