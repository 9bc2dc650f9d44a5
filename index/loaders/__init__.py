"""File -> Document. One loader per format, chosen by file extension; the Office formats check
that the bytes are what the extension says (index/loaders/ooxml.py)."""

from __future__ import annotations

from pathlib import PurePath

from index.config import LoaderLimits, OcrConfig
from index.errors import (
    DocumentRefusedError,
    FileTooLargeError,
    MalformedDocumentError,
    UnsupportedFileError,
)
from index.loaders.base import DocumentLoader
from index.loaders.html import HtmlLoader
from index.loaders.image import ImageLoader
from index.loaders.mail import MailLoader
from index.loaders.markdown import MarkdownLoader
from index.loaders.ocr import OcrReader
from index.loaders.pdf import PdfLoader
from index.loaders.sheets import CsvLoader, ExcelLoader
from index.loaders.slides import SlidesLoader
from index.loaders.text import TextLoader
from index.loaders.word import WordLoader
from index.types import Document

# Raised whenever a loader reads the same bytes into different text (2: HTML page titles kept,
# hard-wrapped lines joined; 3: tables as Markdown tables that repeat their header, PDF tables
# and scanned pages). A document stored by an older loader is read again when its file
# is ingested again, though its bytes have not changed.
LOADER_VERSION = "3"

LOADERS: tuple[DocumentLoader, ...] = (
    PdfLoader(),
    MarkdownLoader(),
    HtmlLoader(),
    TextLoader(),
    WordLoader(),
    SlidesLoader(),
    ExcelLoader(),
    CsvLoader(),
    MailLoader(),
    ImageLoader(),
)
SUPPORTED_EXTENSIONS = tuple(ext for loader in LOADERS for ext in loader.extensions)


def loader_for(file_name: str) -> DocumentLoader:
    suffix = PurePath(file_name).suffix.lower()
    for loader in LOADERS:
        if suffix in loader.extensions:
            return loader
    raise UnsupportedFileError(
        file_name,
        f"unsupported file type {suffix or '(no extension)'!r}; "
        f"supported: {', '.join(SUPPORTED_EXTENSIONS)}",
    )


def load_document(
    data: bytes,
    file_name: str,
    limits: LoaderLimits,
    ocr: OcrConfig | OcrReader | None = None,
) -> Document:
    """Read ``data`` (the bytes of ``file_name``) into a validated Document, or refuse it;
    ``ocr``: how scans are read (default: OcrConfig()), with the
    file's cancellation check when an OcrReader."""
    loader = loader_for(file_name)
    if len(data) > limits.max_bytes:
        raise FileTooLargeError(
            file_name,
            f"{len(data):,} bytes is more than limits.max_bytes ({limits.max_bytes:,})",
        )
    try:
        if not isinstance(ocr, OcrReader):
            ocr = OcrReader(ocr or OcrConfig())
        return loader.load(data, file_name, limits, ocr)
    except (DocumentRefusedError, MemoryError):
        raise
    except Exception as exc:  # parsers raise many types on hostile input (RecursionError ...)
        raise MalformedDocumentError(
            file_name, f"unreadable {loader.media_type} ({type(exc).__name__}: {exc})"
        ) from exc


__all__ = ["LOADERS", "SUPPORTED_EXTENSIONS", "DocumentLoader", "load_document", "loader_for"]
