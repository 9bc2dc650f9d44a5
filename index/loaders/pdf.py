"""PDF via pypdf: text per page (page numbers kept), headings from the outline when present.

A page with tables is read by pdfplumber as bands of text and tables (index/loaders/
pdf_tables.py), each table a Markdown table that repeats its header; a page without a text
layer that shows an image (a scan) is drawn by pypdfium2 and read by Tesseract
(index/loaders/ocr.py), its blocks marked as read by OCR.
"""

from __future__ import annotations

import io
import logging
import re

from pypdf import PdfReader
from pypdf.errors import PyPdfError

from index.config import LoaderLimits, OcrConfig
from index.errors import DocumentRefusedError, FileTooLargeError, MalformedDocumentError
from index.loaders.base import DocumentBuilder, measure, paragraphs
from index.loaders.ocr import OCR_MARK, OcrReader, check_pixels
from index.loaders.pdf_tables import PageTable, bands
from index.loaders.tables import add_table
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
    pieces: list[str | PageTable],
    number: int,
    path: tuple[str, ...],
    starts_here: list[tuple[int, tuple[str, ...]]],
    mark: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """Add one page's paragraphs and tables; a line equal to an outline title on this page
    starts its section. ``mark`` ends the heading path of every block (OCR_MARK). Returns the
    heading path in force at the end of the page."""
    lines: list[str] = []
    texts = [clean_text(_HYPHENATED.sub("", p)) for p in pieces if isinstance(p, str)]
    width = measure("\n".join(texts))

    def flush() -> None:
        for paragraph in paragraphs("\n".join(lines), width):
            builder.add(paragraph, "paragraph", (*path, *mark), page=number)
        lines.clear()

    for piece in pieces:
        if isinstance(piece, PageTable):
            flush()
            add_table(builder, piece.rows, (*path, *mark), page=number)
            continue
        for line in texts.pop(0).split("\n"):
            if starts_here and collapse_whitespace(line) == starts_here[0][1][-1]:
                flush()
                path = starts_here.pop(0)[1]
                builder.add(line, "heading", path, page=number)
            else:
                lines.append(line)
    flush()
    # Titles not found in the text (drawn as images, say) still apply from the next page on.
    return starts_here[-1][1] if starts_here else path


def _is_scan(page, text: str, ocr: OcrConfig) -> bool:
    """No usable text layer, and an image to read instead."""
    if len(text.strip()) >= ocr.min_text_chars:
        return False
    try:
        return len(page.images) > 0
    except Exception:  # an undecodable image: nothing OCR could read either
        return False


class _Pages:
    """The other readers of one PDF, opened when a page first needs them."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._plumber = None
        self._pdfium = None

    def pieces(self, index: int, text: str) -> list[str | PageTable]:
        """The page as bands of text and tables; just ``text`` on a page without tables."""
        if self._plumber is None:
            import pdfplumber

            self._plumber = pdfplumber.open(io.BytesIO(self._data))
        page = self._plumber.pages[index]
        pieces = bands(page)
        page.close()
        return pieces if any(isinstance(p, PageTable) for p in pieces) else [text]

    def image(self, index: int, dpi: int, file_name: str, limits: LoaderLimits):
        if self._pdfium is None:
            import pypdfium2

            self._pdfium = pypdfium2.PdfDocument(self._data)
        page = self._pdfium[index]
        width, height = page.get_size()
        scale = dpi / 72
        check_pixels(int(width * scale), int(height * scale), file_name, limits)
        return page.render(scale=scale, grayscale=True).to_pil()

    def close(self) -> None:
        for reader in (self._plumber, self._pdfium):
            if reader is not None:
                reader.close()


class PdfLoader:
    media_type = "application/pdf"
    extensions = (".pdf",)

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
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
            scanned = 0
            pages = _Pages(data)
            try:
                for index, page in enumerate(reader.pages):
                    starts_here = [entry for entry in outline if entry[0] == index]
                    text, mark = page.extract_text() or "", ()
                    if ocr.config.enabled and _is_scan(page, text, ocr.config):
                        ocr.check(file_name)
                        scanned += 1
                        if scanned > limits.max_ocr_pages:
                            raise FileTooLargeError(
                                file_name,
                                f"more than limits.max_ocr_pages ({limits.max_ocr_pages:,}) "
                                "scanned pages to read by OCR",
                            )
                        image = pages.image(index, ocr.config.dpi, file_name, limits)
                        text = ocr.read(image, file_name, f"page {index + 1}")
                        pieces, mark = [text], (OCR_MARK,)
                    else:
                        pieces = pages.pieces(index, text) if text.strip() else [text]
                    path = _add_page(builder, pieces, index + 1, path, starts_here, mark)
            finally:
                pages.close()
        except DocumentRefusedError:
            raise
        except Exception as exc:  # pypdf raises many types on damaged files
            raise MalformedDocumentError(
                file_name, f"unreadable or damaged PDF ({type(exc).__name__}: {exc})"
            ) from exc
        return builder.build(page_count=page_count)
