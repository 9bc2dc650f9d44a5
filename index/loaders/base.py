"""What every loader shares: the Protocol, and the builder that assembles validated text."""

from __future__ import annotations

from typing import Protocol

from index.config import LoaderLimits
from index.errors import FileTooLargeError
from index.text import clean_text
from index.types import Block, BlockKind, Document

BLOCK_SEPARATOR = "\n\n"


class DocumentLoader(Protocol):
    """Reads one file format into a Document; raises a DocumentRefusedError subclass."""

    media_type: str
    extensions: tuple[str, ...]

    def load(self, data: bytes, file_name: str, limits: LoaderLimits) -> Document: ...


class DocumentBuilder:
    """Appends cleaned blocks to one text, recording each block's offsets and structure.

    Blocks are separated by a blank line, so ``text[block.start:block.end]`` is the block's
    text exactly, and the character limit is enforced while the text grows.
    """

    def __init__(self, file_name: str, media_type: str, limits: LoaderLimits) -> None:
        self.file_name = file_name
        self.media_type = media_type
        self._limits = limits
        self._parts: list[str] = []
        self._blocks: list[Block] = []
        self._length = 0

    def add(
        self,
        raw: str,
        kind: BlockKind,
        heading_path: tuple[str, ...] = (),
        page: int | None = None,
    ) -> None:
        text = clean_text(raw, keep_indent=kind == "code")
        if not text.strip():
            return
        if self._parts:
            self._parts.append(BLOCK_SEPARATOR)
            self._length += len(BLOCK_SEPARATOR)
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        if self._length > self._limits.max_chars:
            raise FileTooLargeError(
                self.file_name,
                f"more than {self._limits.max_chars:,} characters of text "
                "(limits.max_chars); split the document or raise the limit",
            )
        self._blocks.append(Block(start, self._length, kind, heading_path, page))

    def build(self, page_count: int | None = None) -> Document:
        return Document(
            file_name=self.file_name,
            media_type=self.media_type,
            text="".join(self._parts),
            blocks=tuple(self._blocks),
            page_count=page_count,
        )


def paragraphs(text: str) -> list[str]:
    """Split plain text on blank lines."""
    return [p for p in clean_text(text).split(BLOCK_SEPARATOR) if p.strip()]
