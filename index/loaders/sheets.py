"""Spreadsheets: Excel workbooks (openpyxl, read-only, cached values) and CSV files. Each sheet
is a section; each row is one line that names its columns ("Model: GX-42; Capacity (kg): 82."),
in blocks of whole rows titled with the sheet and their row range ("Budget", "rows 2-14"), so
a citation names both and a chunk of rows still says what each value is."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence

from index.config import LoaderLimits
from index.errors import FileTooLargeError
from index.loaders.base import DocumentBuilder
from index.loaders.ocr import OcrReader
from index.loaders.ooxml import open_package
from index.loaders.tables import cell, record_blocks, row_line
from index.loaders.text import decode_text
from index.types import Document


def add_sheet(
    builder: DocumentBuilder,
    title: str | None,
    rows: Iterable[Sequence[object]],
    limits: LoaderLimits,
    counted: list[int],
) -> None:
    """One sheet (``title``: its name; None for a CSV file, which has one): the first
    non-empty row is the header; later rows keep their row numbers. ``counted`` carries the
    file's row count across sheets (limits.max_rows)."""
    numbered = _non_empty(rows)
    first = next(numbered, None)
    if first is None:
        return
    header_number, header = first
    width = len(header)
    names = [cell(v) or f"column {i + 1}" for i, v in enumerate(header)]

    def body() -> Iterator[tuple[int, list[str]]]:
        for number, values in numbered:
            counted[0] += 1
            if counted[0] > limits.max_rows:
                raise FileTooLargeError(
                    builder.file_name,
                    f"more than {limits.max_rows:,} rows (limits.max_rows); split the file",
                )
            padded = [cell(v) for v in values][:width]
            yield number, padded + [""] * (width - len(padded))

    path = (title,) if title else ()
    if title:
        builder.add(title, "heading", path)
    blocks = 0
    for start, end, table in record_blocks(names, body()):
        builder.add(table, "table", (*path, f"rows {start}-{end}"))
        blocks += 1
    if not blocks:  # a header and nothing under it
        builder.add(row_line(names), "table", (*path, f"row {header_number}"))


def _non_empty(rows: Iterable[Sequence[object]]) -> Iterator[tuple[int, Sequence[object]]]:
    for number, values in enumerate(rows, start=1):
        values = list(values)
        while values and cell(values[-1]) == "":
            values.pop()
        if values:
            yield number, values


class ExcelLoader:
    media_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    extensions = (".xlsx",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        from openpyxl import load_workbook

        package = open_package(data, file_name, limits, "Excel")
        workbook = load_workbook(package, read_only=True, data_only=True)
        try:
            builder = DocumentBuilder(file_name, self.media_type, limits)
            counted = [0]
            sheets = workbook.worksheets
            if len(sheets) > limits.max_pages:
                raise FileTooLargeError(
                    file_name,
                    f"{len(sheets)} sheets, more than limits.max_pages ({limits.max_pages})",
                )
            for sheet in sheets:
                add_sheet(builder, sheet.title, sheet.iter_rows(values_only=True), limits, counted)
            return builder.build(page_count=len(sheets))
        finally:
            workbook.close()


class CsvLoader:
    media_type = "text/csv"
    extensions = (".csv", ".tsv")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        text = decode_text(data, file_name)
        sample = text[:8192]
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel_tab if file_name.lower().endswith(".tsv") else csv.excel
        builder = DocumentBuilder(file_name, self.media_type, limits)
        rows = csv.reader(io.StringIO(text, newline=""), dialect)
        add_sheet(builder, None, rows, limits, [0])
        return builder.build()
