"""PDF via pypdf: text per page (page numbers kept), headings from the outline when present."""

from __future__ import annotations

import io
import logging
import re

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from index.config import LoaderLimits
from index.errors import FileTooLargeError, MalformedDocumentError
from index.loaders.base import DocumentBuilder, measure, paragraphs
from index.text import clean_text, collapse_whitespace
from index.types import Document

log = logging.getLogger(__name__)

# A word hyphenated across a line break ("infor-\nmation"): joined when both sides are lowercase.
_HYPHENATED = re.compile(r"(?<=[a-zà-ÿ])-\n(?=[a-zà-ÿ])")


def _outline_by_page(reader: PdfReader) -> list[tuple[int, tuple[str, ...]]]:
    """Outline (bookmark) entries as (first page index, heading path), in page order."""
    entries: list[tuple[int, tuple[str, ...]]] = []

    def visit(items: list, parents: tuple[str, ...]) -> None:
        last: tuple[str, ...] = parents
        for item in items:
            if isinstance(item, list):
                visit(item, last)
                continue
            title = collapse_whitespace(str(getattr(item, "title", "") or ""))
            page = reader.get_destination_page_number(item)
            if title and page is not None and page >= 0:
                last = (*parents, title)
                entries.append((page, last))

    try:
        visit(reader.outline, ())
    except (PyPdfError, KeyError, TypeError, ValueError) as exc:  # a broken outline is not fatal
        log.warning("ignoring unreadable PDF outline: %s", exc)
        return []
    return sorted(entries, key=lambda entry: entry[0])


def _add_page(
    builder: DocumentBuilder,
    raw: str,
    number: int,
    path: tuple[str, ...],
    starts_here: list[tuple[int, tuple[str, ...]]],
) -> tuple[str, ...]:
    """Add one page's paragraphs; a line equal to an outline title on this page starts its
    section. Returns the heading path in force at the end of the page."""
    lines: list[str] = []
    text = clean_text(_HYPHENATED.sub("", raw))
    width = measure(text)

    def flush() -> None:
        for paragraph in paragraphs("\n".join(lines), width):
            builder.add(paragraph, "paragraph", path, page=number)
        lines.clear()

    for line in text.split("\n"):
        if starts_here and collapse_whitespace(line) == starts_here[0][1][-1]:
            flush()
            path = starts_here.pop(0)[1]
            builder.add(line, "heading", path, page=number)
        else:
            lines.append(line)
    flush()
    # Titles not found in the text (drawn as images, say) still apply from the next page on.
    return starts_here[-1][1] if starts_here else path


class PdfLoader:
    media_type = "application/pdf"
    extensions = (".pdf",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits) -> Document:
        if not data.lstrip()[:5].startswith(b"%PDF"):
            raise MalformedDocumentError(file_name, "not a PDF file (no %PDF header)")
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise MalformedDocumentError(
                    file_name, "the PDF is encrypted with a password; upload a decrypted copy"
                )
            page_count = len(reader.pages)
            if page_count > limits.max_pages:
                raise FileTooLargeError(
                    file_name,
                    f"{page_count:,} pages is more than limits.max_pages ({limits.max_pages:,})",
                )
            outline = _outline_by_page(reader)
            builder = DocumentBuilder(file_name, self.media_type, limits)
            path: tuple[str, ...] = ()
            for index, page in enumerate(reader.pages):
                starts_here = [entry for entry in outline if entry[0] == index]
                path = _add_page(builder, page.extract_text() or "", index + 1, path, starts_here)
        except (MalformedDocumentError, FileTooLargeError):
            raise
        except Exception as exc:  # pypdf raises many types on damaged files
            raise MalformedDocumentError(
                file_name, f"unreadable or damaged PDF ({type(exc).__name__}: {exc})"
            ) from exc
        return builder.build(page_count=page_count)
