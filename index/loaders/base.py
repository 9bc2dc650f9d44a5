"""What every loader shares: the Protocol, and the builder that assembles validated text."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

from index.config import LoaderLimits
from index.errors import FileTooLargeError
from index.text import clean_text, continues_sentence
from index.types import Block, BlockKind, Document

if TYPE_CHECKING:
    from index.loaders.ocr import OcrReader

BLOCK_SEPARATOR = "\n\n"


class DocumentLoader(Protocol):
    """Reads one file format into a Document; raises a DocumentRefusedError subclass.
    ``ocr``: how scanned pages and images are read, for the loaders that meet them."""

    media_type: str
    extensions: tuple[str, ...]

    def load(
        self, data: bytes, file_name: str, limits: LoaderLimits, ocr: OcrReader
    ) -> Document: ...


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


def paragraphs(text: str, width: int | None = None) -> list[str]:
    """Split plain text on blank lines, each paragraph's hard-wrapped lines joined (``width``:
    the measure of the page they are on; by default, of ``text``)."""
    text = clean_text(text)
    width = measure(text) if width is None else width
    return [unwrap(p, width) for p in text.split(BLOCK_SEPARATOR) if p.strip()]


# A line that starts an item: a bullet, or an enumerator ("3.", "b)", "(iv)"); a rule or underline.
_BULLET = re.compile(r"\s*[-*+•–·▪◦](?:\s|$)")
_ENUMERATOR = re.compile(r"\s*\(?(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,5})[.)](?:\s|$)")
_RULE = re.compile(r"\s*([-=_*~#])\1{2,}\s*$")
_SENTENCE_END = (".", "!", "?")
_CLAUSE_END = (*_SENTENCE_END, ":", ";")
_PUNCT = (*_CLAUSE_END, ",")
MIN_MEASURE = 40  # lines all shorter than this are not wrapped prose (an address, a list)


def measure(text: str) -> int:
    """The width text is wrapped at, in characters: the length that nine lines in ten do not
    exceed (a long unwrapped line does not set it)."""
    lengths = sorted(len(line) for line in text.split("\n") if line.strip())
    return lengths[int((len(lengths) - 1) * 0.9 + 0.5)] if lengths else 0


def unwrap(paragraph: str, width: int) -> str:
    """Hard-wrapped lines (plain text, PDF lines) joined into the lines they were wrapped
    from, so that a sentence is one line.

    A break is a wrap when its line is no longer than the measure (with a margin for PDF's
    proportional type) and either fills it (the next word would not have fitted) or is long
    and ends mid-sentence before a line that goes on in lower case. A line that starts with a
    bullet, a rule or an underline is its own; so is one that starts with an enumerator after
    a finished line, a short line without end punctuation after a finished sentence (a PDF's
    heading), and a line in lower case after a finished sentence (a chat or log record)."""
    if width < MIN_MEASURE:
        return paragraph
    lines = paragraph.split("\n")
    joined = [lines[0]]
    for previous, line in pairwise(lines):
        before = previous.rstrip()
        words = line.split(maxsplit=1)
        ended = before.endswith(_SENTENCE_END)
        fills = len(before) + 1 + len(words[0] if words else "") > 0.9 * width
        mid_sentence = len(before) >= 0.6 * width and not before.endswith(_CLAUSE_END)
        wraps = len(before) <= 1.2 * width and (
            (fills and not (ended and continues_sentence(line)))
            or (mid_sentence and continues_sentence(line))
        )
        own = (
            not words
            or _BULLET.match(line)
            or _RULE.match(line)
            or _RULE.match(previous)
            or (_ENUMERATOR.match(line) and not (fills and not ended))
            or (ended and len(line.strip()) < 0.6 * width and not line.rstrip().endswith(_PUNCT))
        )
        if wraps and not own:
            joined[-1] = f"{joined[-1].rstrip()} {line.strip()}"
        else:
            joined.append(line)
    return "\n".join(joined)
