"""Structure-aware chunking measured in tokens of the embedding model's own tokenizer.

Blocks are grouped by section (heading path) and page; a group is packed into chunks of at most
``size`` tokens, splitting a block that is too large into sentences (or lines, for code, lists
and tables), and a sentence that is still too large at token boundaries. Consecutive chunks of
one group share up to ``overlap`` tokens of whole units. Every chunk is a slice of the document
text: ``document.text[chunk.start:chunk.end] == chunk.text``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from index.config import ChunkerConfig
from index.errors import ConfigError
from index.types import Block, Chunk, Document

CHUNKER_VERSION = "structure-v1"

# End of a sentence: terminal punctuation, optional closing quotes/brackets, then whitespace.
_SENTENCE_END = re.compile(r"(?<=[.!?…;])[\"'»”’)\]]*\s+")


class TokenCounter(Protocol):
    """The embedding model's tokenizer, as the chunker needs it (no special tokens)."""

    def count(self, text: str) -> int: ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of each token of ``text``."""
        ...


@dataclass(frozen=True, slots=True)
class _Unit:
    start: int
    end: int


def chunk_id(tenant: str, doc_id: str, version: int, position: int) -> str:
    """Stable id: the same tenant, document version and position always give the same id."""
    key = f"{tenant}\x1f{doc_id}\x1f{version}\x1f{position}".encode()
    return hashlib.sha256(key).hexdigest()[:24]


def _spans(text: str, pattern: re.Pattern[str], base: int) -> list[_Unit]:
    """Split ``text`` after each match of ``pattern``; spans exclude the separating whitespace."""
    units, start = [], 0
    for match in pattern.finditer(text):
        piece = text[start : match.start()]
        if piece.strip():
            units.append(_Unit(base + start, base + start + len(piece.rstrip())))
        start = match.end()
    piece = text[start:]
    if piece.strip():
        units.append(_Unit(base + start, base + start + len(piece.rstrip())))
    return units


class StructureChunker:
    """Chunks Documents; refuses a configuration that the embedder could not encode whole."""

    version = CHUNKER_VERSION

    def __init__(self, config: ChunkerConfig, tokenizer: TokenCounter, max_tokens: int) -> None:
        if config.size > max_tokens:
            raise ConfigError(
                f"chunker.size ({config.size}) is larger than the embedder can encode "
                f"({max_tokens} tokens without special tokens); lower chunker.size",
                param="chunker.size",
            )
        self.config = config
        self.tokenizer = tokenizer

    def chunk(self, document: Document, *, tenant: str, doc_id: str, version: int) -> list[Chunk]:
        text = document.text
        chunks: list[Chunk] = []
        for blocks in self._groups(document.blocks):
            units = [u for block in blocks for u in self._units(text, block)]
            for start, end, tokens in self._pack(text, units):
                position = len(chunks)
                chunks.append(
                    Chunk(
                        chunk_id=chunk_id(tenant, doc_id, version, position),
                        doc_id=doc_id,
                        version=version,
                        position=position,
                        start=start,
                        end=end,
                        text=text[start:end],
                        heading_path=blocks[-1].heading_path,
                        page=blocks[-1].page,
                        token_count=tokens,
                    )
                )
        return chunks

    @staticmethod
    def _groups(blocks: Sequence[Block]) -> list[list[Block]]:
        """Runs of blocks with one heading path and page; lone headings join the next run."""
        groups: list[list[Block]] = []
        for block in blocks:
            previous = groups[-1] if groups else None
            same = previous is not None and (previous[-1].heading_path, previous[-1].page) == (
                block.heading_path,
                block.page,
            )
            only_headings = previous is not None and all(b.kind == "heading" for b in previous)
            if previous is not None and (
                same or (only_headings and previous[-1].page == block.page)
            ):
                previous.append(block)
            else:
                groups.append([block])
        return groups

    def _units(self, text: str, block: Block) -> list[_Unit]:
        """The block itself if it fits, else sentences (or lines), else token windows."""
        size = self.config.size
        if self.tokenizer.count(text[block.start : block.end]) <= size:
            return [_Unit(block.start, block.end)]
        pattern = _SENTENCE_END if block.kind in ("paragraph", "quote") else re.compile(r"\n")
        units: list[_Unit] = []
        for unit in _spans(text[block.start : block.end], pattern, block.start):
            if self.tokenizer.count(text[unit.start : unit.end]) <= size:
                units.append(unit)
            else:
                units.extend(self._windows(text, unit))
        return units

    def _windows(self, text: str, unit: _Unit) -> list[_Unit]:
        """Cut a span at token boundaries into pieces of at most ``size`` tokens."""
        size = self.config.size
        offsets = self.tokenizer.offsets(text[unit.start : unit.end])
        windows, first = [], 0
        while first < len(offsets):
            last = min(first + size, len(offsets)) - 1
            while True:  # re-tokenising a piece can merge differently: shrink until it fits
                start, end = unit.start + offsets[first][0], unit.start + offsets[last][1]
                if last == first or self.tokenizer.count(text[start:end]) <= size:
                    break
                last -= 1
            windows.append(_Unit(start, end))
            first = last + 1
        return windows

    def _pack(self, text: str, units: list[_Unit]) -> list[tuple[int, int, int]]:
        """Greedy packing of consecutive units; returns (start, end, tokens) per chunk."""
        count = self.tokenizer.count
        size, overlap = self.config.size, self.config.overlap
        packed: list[tuple[int, int, int]] = []
        current: list[_Unit] = []
        for unit in units:
            if current and count(text[current[0].start : unit.end]) > size:
                end = current[-1].end
                packed.append((current[0].start, end, count(text[current[0].start : end])))
                # Overlap: the longest tail of whole units within `overlap` tokens, never all.
                tail: list[_Unit] = []
                for previous in reversed(current[1:]):
                    if count(text[previous.start : end]) > overlap:
                        break
                    tail.insert(0, previous)
                current = tail
                while current and count(text[current[0].start : unit.end]) > size:
                    current.pop(0)
            current.append(unit)
        if current:
            start, end = current[0].start, current[-1].end
            packed.append((start, end, count(text[start:end])))
        return packed
