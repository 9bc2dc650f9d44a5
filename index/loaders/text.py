"""Plain text: UTF-8 (or a detected legacy encoding), paragraphs on blank lines."""

from __future__ import annotations

from charset_normalizer import from_bytes

from index.config import LoaderLimits
from index.errors import MalformedDocumentError
from index.loaders.base import DocumentBuilder, paragraphs
from index.loaders.ocr import OcrReader
from index.types import Document

WESTERN = "cp1252"


def decode_text(data: bytes, file_name: str, declared: str | None = None) -> str:
    """Decode text bytes, refusing binary content.

    UTF-8 first (with or without BOM), then an encoding the file declares (HTML's meta
    charset), else the one charset-normalizer detects (CP1252, CP1251 ... in older documents).
    """
    if b"\x00" in data[:8192]:
        raise MalformedDocumentError(file_name, "binary content (NUL bytes), not text")
    for encoding in filter(None, ("utf-8-sig", declared)):
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise MalformedDocumentError(
            file_name, "not readable as text in any known encoding; save it as UTF-8"
        )
    # Short Western European texts fit several code pages equally well, and the detector's
    # tie-break picks CP1250 ("élčves"); prefer CP1252, the usual one, among the best fits.
    for match in matches:
        if match.chaos <= best.chaos and WESTERN in match.could_be_from_charset:
            return data.decode(WESTERN)
    return str(best)


class TextLoader:
    media_type = "text/plain"
    extensions = (".txt", ".text")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader) -> Document:
        builder = DocumentBuilder(file_name, self.media_type, limits)
        for paragraph in paragraphs(decode_text(data, file_name)):
            builder.add(paragraph, "paragraph")
        return builder.build()
