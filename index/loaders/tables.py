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


def _blocks(
    lines: Iterable[tuple[int, str]], head: str, max_chars: int
) -> Iterator[tuple[int, int, str]]:
    """(first row number, last row number, text) per block of whole numbered ``lines``, each
    block ``head`` (if any) then its lines, under ``max_chars`` where a line allows."""
    taken: list[str] = []
    first = last = 0
    size = len(head) + 1 if head else 0
    for number, line in lines:
        if taken and size + sum(len(x) + 1 for x in taken) + len(line) > max_chars:
            yield first, last, "\n".join([head, *taken] if head else taken)
            taken = []
        if not taken:
            first = number
        taken.append(line)
        last = number
    if taken:
        yield first, last, "\n".join([head, *taken] if head else taken)


def table_blocks(
    header: Sequence[str], rows: Iterable[tuple[int, Sequence[str]]], max_chars: int = BLOCK_CHARS
) -> Iterator[tuple[int, int, str]]:
    """Markdown tables of whole ``rows`` (numbered as the source numbers them), each repeating
    the header row: (first row number, last row number, table) per block."""
    head = row_line(header) + "\n" + row_line(["---"] * len(header))
    return _blocks(((n, row_line(values)) for n, values in rows), head, max_chars)


def add_table(builder, rows: Sequence[Sequence[str]], path: tuple[str, ...] = (),
              page: int | None = None) -> None:  # fmt: skip
    """Add a table read as rows of cells (the first row its header) as table blocks; rows are
    padded to the widest, so that every value stays under its column."""
    if not rows:
        return
    width = max(len(row) for row in rows)
    header, *body = [[*row, *[""] * (width - len(row))] for row in rows]
    for _, _, table in table_blocks(header, enumerate(body, start=1)):
        builder.add(table, "table", path, page=page)


def record_blocks(
    header: Sequence[str], rows: Iterable[tuple[int, Sequence[str]]], max_chars: int = BLOCK_CHARS
) -> Iterator[tuple[int, int, str]]:
    """Blocks of whole ``rows``, each row one line that names every value: "Model: GX-42;
    Capacity (kg): 82." (empty cells left out, and rows with none)."""

    def named() -> Iterator[tuple[int, str]]:
        for number, values in rows:
            pairs = [f"{name}: {value}" for name, value in zip(header, values, strict=False)
                     if value]  # fmt: skip
            if pairs:
                yield number, "; ".join(pairs) + "."

    return _blocks(named(), "", max_chars)
