"""Typed, frozen records passed between the ingestion stages and returned by shards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["heading", "paragraph", "code", "list", "table", "quote"]


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph-like span of a document's validated text: ``text[start:end]``."""

    start: int
    end: int
    kind: BlockKind
    heading_path: tuple[str, ...] = ()
    page: int | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """Validated text (NFC, no control or invisible characters) and its structure.

    ``blocks`` are ordered, non-overlapping and separated by blank lines in ``text``.
    ``media_type`` is the loader that read it (``application/pdf``, ``text/markdown`` ...).
    """

    file_name: str
    media_type: str
    text: str
    blocks: tuple[Block, ...]
    page_count: int | None = None

    @property
    def sections(self) -> list[tuple[tuple[str, ...], int, int]]:
        """Runs of blocks under one heading path, as ``(heading_path, start, end)``."""
        runs: list[tuple[tuple[str, ...], int, int]] = []
        for block in self.blocks:
            if runs and runs[-1][0] == block.heading_path:
                runs[-1] = (block.heading_path, runs[-1][1], block.end)
            else:
                runs.append((block.heading_path, block.start, block.end))
        return runs


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable unit: ``document_text[start:end] == text``."""

    chunk_id: str
    doc_id: str
    version: int
    position: int
    start: int
    end: int
    text: str
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    token_count: int = 0


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A stored document, as listed by a shard."""

    doc_id: str
    source: str
    file_name: str
    media_type: str
    content_hash: str
    version: int
    chunk_count: int
    char_count: int
    byte_count: int
    page_count: int | None
    created_at: str
    updated_at: str
    attributes: dict[str, str] = field(default_factory=dict)
    # Instruction-like passages found at ingest (index/screening.py): withheld from prompts.
    flagged: tuple[tuple[int, int, str], ...] = ()  # (start, end, reason) in the text
    # Who may read it (index/access.py): None, the whole tenant; else user:/group: principals.
    access: tuple[str, ...] | None = None
    owner: str | None = None  # who created it (user:<name>, key:<id>); None: an operator


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One retrieved chunk with where it came from and how it scored.

    ``dense_score`` is the cosine similarity (None when it came from lexical search only);
    ``bm25_score`` is SQLite's bm25() negated so that higher is better (None when dense only).
    """

    chunk_id: str
    doc_id: str
    file_name: str
    heading_path: tuple[str, ...]
    page: int | None
    start: int
    end: int
    text: str
    dense_score: float | None = None
    bm25_score: float | None = None
    rerank_score: float | None = None  # set when a reranker rescored the hit
    # The document's instruction-like passages (flagged at ingest) inside this chunk, as
    # offsets into ``text``: the prompt withholds them.
    flagged: tuple[tuple[int, int], ...] = ()
    # The score a client sees, in [0, 1]: set by the query pipeline (serve/query/relevance.py).
    relevance: float | None = None
    # A question that asks two things: the judge's score against the whole question and
    # against its first part (serve/query/compound.py); rerank_score is the higher.
    part_scores: tuple[float, ...] = ()
    # A table passage: the rows the judge scored best against the question (serve/query/
    # rows.py), which the prompt shows of its table; None: every row.
    rows: tuple[str, ...] | None = None
