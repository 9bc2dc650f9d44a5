"""Word documents (.docx) through python-docx: the body in order, headings (the "Heading N" and
"Title" styles) as the heading path, list paragraphs as lists, tables as Markdown tables that
repeat their header row (index/loaders/tables.py)."""

from __future__ import annotations

import re

from index.config import LoaderLimits
from index.loaders.base import DocumentBuilder
from index.loaders.ocr import OcrReader
from index.loaders.ooxml import open_package
from index.loaders.tables import add_table, cell
from index.types import Document

_HEADING = re.compile(r"^(?:heading|titre)\s*(\d)$", re.IGNORECASE)


def _level(style_name: str) -> int | None:
    """The heading level of a paragraph style: "Heading 2" is 2, "Title" is 0, else None."""
    if style_name.lower() in ("title", "titre"):
        return 0
    match = _HEADING.match(style_name.strip())
    return int(match.group(1)) if match else None


class WordLoader:
    media_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    extensions = (".docx",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        import docx
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        document = docx.Document(open_package(data, file_name, limits, "Word"))
        builder = DocumentBuilder(file_name, self.media_type, limits)
        headings: list[tuple[int, str]] = []
        items: list[str] = []

        def path() -> tuple[str, ...]:
            return tuple(title for _, title in headings)

        def flush_list() -> None:
            if items:
                builder.add("\n".join(items), "list", path())
                items.clear()

        for block in document.iter_inner_content():
            if isinstance(block, Table):
                flush_list()
                add_table(
                    builder, [[cell(c.text) for c in row.cells] for row in block.rows], path()
                )
                continue
            assert isinstance(block, Paragraph)
            text = block.text.strip()
            if not text:
                continue
            style = block.style.name if block.style is not None else ""
            level = _level(style)
            if level is not None:
                flush_list()
                headings = [h for h in headings if h[0] < level] + [(level, text)]
                builder.add(text, "heading", path())
            elif "list" in style.lower() or (
                block._p.pPr is not None and block._p.pPr.numPr is not None
            ):
                items.append(f"- {text}")
            else:
                flush_list()
                builder.add(text, "paragraph", path())
        flush_list()
        return builder.build()
