"""Markdown via markdown-it-py (CommonMark + tables): headings, paragraphs, lists, code blocks."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token

from index.config import LoaderLimits
from index.loaders.base import DocumentBuilder
from index.loaders.html import fragment_text
from index.loaders.ocr import OcrReader
from index.loaders.tables import add_table, cell
from index.loaders.text import decode_text
from index.text import collapse_whitespace
from index.types import BlockKind, Document

_CONTAINERS: dict[str, BlockKind] = {
    "paragraph_open": "paragraph",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "blockquote_open": "quote",
    "table_open": "table",
}


def _inline_text(token: Token) -> str:
    """Plain text of an inline token: markup and link targets dropped, image alt text kept. A
    soft line break (a paragraph wrapped in the source) is a space, as CommonMark renders it;
    a hard one ("  " or "\\" at the end of a line) stays a line break."""
    out: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "image"):
            out.append(child.content)
        elif child.type == "softbreak":
            out.append(" ")
        elif child.type == "hardbreak":
            out.append("\n")
    return "".join(out)


class MarkdownLoader:
    media_type = "text/markdown"
    extensions = (".md", ".markdown")

    def __init__(self) -> None:
        self._parser = MarkdownIt("commonmark").enable("table")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        builder = DocumentBuilder(file_name, self.media_type, limits)
        tokens = self._parser.parse(decode_text(data, file_name))
        headings: list[tuple[int, str]] = []
        heading_level: int | None = None
        container: BlockKind | None = None
        lines: list[str] = []
        row: list[str] | None = None
        rows: list[list[str]] = []  # of the table being read
        prefix = ""

        def path() -> tuple[str, ...]:
            return tuple(title for _, title in headings)

        for token in tokens:
            if token.type == "heading_open":
                heading_level = int(token.tag[1])
            elif token.type == "inline" and heading_level is not None:
                title = collapse_whitespace(_inline_text(token))
                headings = [h for h in headings if h[0] < heading_level] + [(heading_level, title)]
                builder.add(title, "heading", path())
                heading_level = None
            elif token.type in ("fence", "code_block"):
                if container is None:
                    builder.add(token.content, "code", path())
                else:
                    lines.append(token.content.rstrip("\n"))
            elif token.type == "html_block" and container is None:
                builder.add(collapse_whitespace(fragment_text(token.content)), "paragraph", path())
            elif token.level == 0 and token.type in _CONTAINERS:
                container, lines = _CONTAINERS[token.type], []
            elif token.level == 0 and token.nesting == -1 and container == "table":
                add_table(builder, rows, path())
                container, rows = None, []
            elif token.level == 0 and token.nesting == -1 and container is not None:
                builder.add("\n".join(lines), container, path())
                container = None
            elif token.type == "list_item_open":
                marker = f"{token.info}{token.markup}" if token.info else "-"
                prefix = "  " * (token.level // 2) + marker + " "
            elif token.type == "tr_open":
                row = []
            elif token.type == "tr_close" and row is not None:
                rows.append(row)
                row = None
            elif token.type == "inline":
                text = _inline_text(token)
                if row is not None:
                    row.append(cell(text))
                else:
                    lines.append(prefix + text)
                    prefix = ""
        return builder.build()
