"""Tables as Markdown tables, cut into blocks of whole rows that each repeat the header, so
that every chunk holding part of a table still says what each value is."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

# Characters of one table block, header included. A chunk is a slice of the document text, so
# the header can only be in every chunk if every block fits one chunk: MiniLM's tokenizer reads
# a table row at about one token per two characters ("| GX-39 | 79 | 1039 |" is 11), so 320
# characters stay under the default 200-token chunk (tests/integration/test_minilm.py).
BLOCK_CHARS = 320


def cell(value: object) -> str:
    """A cell's text on one line, with the Markdown column separator escaped."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).split()).replace("|", "\\|")


def row_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table_blocks(
    header: Sequence[str], rows: Iterable[tuple[int, Sequence[str]]], max_chars: int = BLOCK_CHARS
) -> Iterator[tuple[int, int, str]]:
    """(first row number, last row number, Markdown table) per block of whole ``rows``
    (numbered as the source numbers them), each under ``max_chars`` where a row allows."""
    head = row_line(header) + "\n" + row_line(["---"] * len(header))
    lines: list[str] = []
    first = last = 0
    for number, values in rows:
        line = row_line(values)
        if lines and len(head) + sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            yield first, last, head + "\n" + "\n".join(lines)
            lines = []
        if not lines:
            first = number
        lines.append(line)
        last = number
    if lines:
        yield first, last, head + "\n" + "\n".join(lines)


def record_blocks(
    header: Sequence[str], rows: Iterable[tuple[int, Sequence[str]]], max_chars: int = BLOCK_CHARS
) -> Iterator[tuple[int, int, str]]:
    """(first row number, last row number, text) per block of whole ``rows``, each row one
    line that names every value: "Model: GX-42; Capacity (kg): 82." (empty cells left out)."""
    lines: list[str] = []
    first = last = 0
    for number, values in rows:
        pairs = [f"{name}: {value}" for name, value in zip(header, values, strict=False) if value]
        if not pairs:
            continue
        line = "; ".join(pairs) + "."
        if lines and sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            yield first, last, "\n".join(lines)
            lines = []
        if not lines:
            first = number
        lines.append(line)
        last = number
    if lines:
        yield first, last, "\n".join(lines)
