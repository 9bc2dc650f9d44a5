"""Plain text: UTF-8 (or a detected legacy encoding), paragraphs on blank lines."""

from __future__ import annotations

from charset_normalizer import from_bytes

from index.config import LoaderLimits
from index.errors import MalformedDocumentError
from index.loaders.base import DocumentBuilder, paragraphs
from index.types import Document


def decode_text(data: bytes, file_name: str) -> str:
    """Decode text bytes, refusing binary content.

    UTF-8 first (with or without BOM); else the encoding charset-normalizer detects with
    confidence (Latin-1, CP1252 ... are common in older French documents).
    """
    if b"\x00" in data[:8192]:
        raise MalformedDocumentError(file_name, "binary content (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None:
        raise MalformedDocumentError(
            file_name, "not readable as text in any known encoding; save it as UTF-8"
        )
    return str(best)


class TextLoader:
    media_type = "text/plain"
    extensions = (".txt", ".text")

    def load(self, data: bytes, file_name: str, limits: LoaderLimits) -> Document:
        builder = DocumentBuilder(file_name, self.media_type, limits)
        for paragraph in paragraphs(decode_text(data, file_name)):
            builder.add(paragraph, "paragraph")
        return builder.build()
