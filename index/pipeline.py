"""Ingestion: load -> chunk -> embed -> write, batched across documents, skipping unchanged ones.

Each document is refused (with the reason) or written whole; results are reported only after
their transaction has committed, so everything reported as ingested survives a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from index.access import KEEP, Access
from index.chunking import StructureChunker
from index.config import LoaderLimits, OcrConfig
from index.embedding import DocumentEmbedder
from index.errors import DocumentRefusedError, FileTooLargeError, MalformedDocumentError
from index.loaders import LOADER_VERSION, SUPPORTED_EXTENSIONS, load_document
from index.loaders.ocr import OcrReader
from index.screening import InstructionJudge, find_instructions
from index.store.rows import Manifest, PreparedDocument
from index.store.shard import TenantShard
from index.types import Chunk, Document

log = logging.getLogger(__name__)

IngestStatus = Literal["added", "replaced", "unchanged", "refused"]


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to ingest: a stable ``source`` key (its absolute path, or an upload name) and how
    to read its bytes. The document id is derived from ``source`` unless given. ``access``:
    who may read it (index/access.py; None, the whole tenant); KEEP, a new document is the
    tenant's and a stored one keeps its list. ``owner``: who creates it (a stored document
    keeps the owner it has)."""

    source: str
    file_name: str
    read: Callable[[], bytes]
    doc_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    access: Access | Literal["keep"] = KEEP
    owner: str | None = None

    @classmethod
    def from_path(cls, path: Path) -> SourceFile:
        resolved = path.resolve()
        return cls(str(resolved), resolved.name, resolved.read_bytes)

    @classmethod
    def from_bytes(cls, data: bytes, file_name: str, **kwargs) -> SourceFile:
        return cls(kwargs.pop("source", file_name), file_name, lambda: data, **kwargs)


@dataclass(frozen=True, slots=True)
class IngestResult:
    source: str
    file_name: str
    status: IngestStatus
    doc_id: str | None = None
    version: int | None = None
    chunks: int = 0
    reason: str | None = None
    refusal_status: int | None = None  # HTTP status of the refusal (413, 415, 400, 404)
    flagged: int = 0  # instruction-like passages found (withheld from prompts)

    def json(self) -> dict:
        """The stable JSON shape (`grounded ingest --json`)."""
        row = dataclasses.asdict(self)
        del row["refusal_status"]
        return row


def doc_id_for(source: str) -> str:
    return "doc-" + hashlib.sha256(source.encode()).hexdigest()[:20]


def discover(paths: Iterable[Path]) -> tuple[list[SourceFile], list[IngestResult]]:
    """Expand files and folders (recursively, hidden entries skipped, supported types only).

    Returns the files to ingest and refusals for paths that do not exist. A file named
    explicitly is always tried, so an unsupported type is reported rather than skipped.
    """
    files: dict[Path, SourceFile] = {}
    missing = []
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                hidden = any(part.startswith(".") for part in child.relative_to(path).parts)
                if child.is_file() and not hidden and child.suffix.lower() in SUPPORTED_EXTENSIONS:
                    files.setdefault(child.resolve(), SourceFile.from_path(child))
        elif path.is_file():
            files.setdefault(path.resolve(), SourceFile.from_path(path))
        else:
            missing.append(
                IngestResult(
                    str(path), path.name, "refused", reason="no such file", refusal_status=404
                )
            )
    return list(files.values()), missing


class IngestPipeline:
    """Ingests files into one tenant shard; embeds chunks of several documents per batch."""

    def __init__(
        self,
        shard: TenantShard,
        embedder: DocumentEmbedder,
        chunker: StructureChunker,
        limits: LoaderLimits,
        batch_chunks: int = 256,
        judge: InstructionJudge | None = None,
        ocr: OcrConfig | None = None,
    ) -> None:
        """``judge``: the instruction screen's judged layer (index/screening.py); None: the
        keyword rules alone."""
        self.shard = shard
        self.embedder = embedder
        self.chunker = chunker
        self.limits = limits
        self.batch_chunks = batch_chunks
        self.judge = judge
        self.ocr = ocr or OcrConfig()

    def ingest(
        self,
        files: Iterable[SourceFile],
        cancelled: Callable[[str], bool] | None = None,
        *,
        flush: bool = True,
    ) -> Iterator[IngestResult]:
        """Yield one result per file, in batches; the vector index is saved at the end
        (unless ``flush`` is off: a caller that ingests in several calls saves it once, with
        ``shard.flush()``; an index not saved is rebuilt from the database when loaded).
        ``cancelled(doc_id)``: asked while a file's scanned pages are read; true stops that
        file (refused, IngestCancelledError: it was deleted meanwhile)."""
        pending: list[PreparedDocument] = []
        try:
            for source in files:
                prepared = self._prepare(source, cancelled)
                if isinstance(prepared, IngestResult):
                    yield prepared
                    continue
                pending.append(prepared)
                if sum(len(p.chunks) for p in pending) >= self.batch_chunks:
                    yield from self._write(pending)
                    pending = []
            yield from self._write(pending)
        finally:
            if flush:
                self.shard.flush()

    def _prepare(
        self, source: SourceFile, cancelled: Callable[[str], bool] | None
    ) -> PreparedDocument | IngestResult:
        def refused(reason: str, status: int = 400) -> IngestResult:
            return IngestResult(
                source.source, source.file_name, "refused", reason=reason, refusal_status=status
            )

        try:
            data = source.read()
        except OSError as exc:
            return refused(f"cannot read the file: {exc.strerror or exc}")
        content_hash = hashlib.sha256(data).hexdigest()
        doc_id = source.doc_id or doc_id_for(source.source)
        current = self.shard.current_version(doc_id)
        same_bytes = current is not None and current.content_hash == content_hash
        access = current.access if current else None
        if source.access != KEEP:
            access = source.access
        if same_bytes and current.loader_version == LOADER_VERSION:  # else read again
            if access != current.access:  # the same file, given to other readers
                self.shard.set_access(doc_id, access)
            return IngestResult(
                source.source, source.file_name, "unchanged", doc_id, current.version
            )
        version = current.version + 1 if current else 1
        try:
            ocr = OcrReader(self.ocr, partial(cancelled, doc_id)) if cancelled else self.ocr
            document = load_document(data, source.file_name, self.limits, ocr)
            if not document.text:
                hint = " (a scan needs index.ocr.enabled)" if document.page_count else ""
                raise MalformedDocumentError(
                    source.file_name, f"contains no extractable text{hint}"
                )
            chunks = self.chunker.chunk(
                document, tenant=self.shard.tenant, doc_id=doc_id, version=version
            )
            if len(chunks) > self.limits.max_chunks:
                raise FileTooLargeError(
                    source.file_name,
                    f"{len(chunks):,} chunks is more than limits.max_chunks "
                    f"({self.limits.max_chunks:,})",
                )
        except DocumentRefusedError as exc:
            return refused(exc.reason, exc.status)
        vectors = np.zeros((0, 0), dtype=np.float32)  # filled in by _write, batched
        return PreparedDocument(
            doc_id,
            source.source,
            document,
            content_hash,
            len(data),
            version,
            chunks,
            vectors,
            dict(source.attributes),
            tuple(find_instructions(document.text, self.judge)),
            LOADER_VERSION,
            access,
            source.owner,
            keep_access=source.access == KEEP,
        )

    def _write(self, pending: list[PreparedDocument]) -> list[IngestResult]:
        if not pending:
            return []
        texts = [chunk.text for item in pending for chunk in item.chunks]
        vectors = self.embedder.embed_documents(texts)
        embedded, offset = [], 0
        for item in pending:
            count = len(item.chunks)
            embedded.append(replace(item, vectors=vectors[offset : offset + count]))
            offset += count
        statuses = self.shard.write_documents(embedded, self.embedder.model_id)
        return [
            IngestResult(
                p.source,
                p.document.file_name,
                status,
                p.doc_id,
                p.version,
                len(p.chunks),
                flagged=len(p.flagged),
            )
            for p, status in zip(embedded, statuses, strict=True)
        ]

    def reindex(self) -> int:
        """Re-chunk and re-embed every stored document with this pipeline's chunker and
        embedder; returns the number of chunks written. Readers go on searching the old
        vectors while the new ones are computed; they replace them in one transaction, which
        also re-embeds whatever was written in the meantime."""
        manifest = Manifest(self.embedder.model_id, self.embedder.dimension, self.chunker.version)
        # Keyed by (version, text): a document deleted and uploaded again restarts at version 1.
        done = {doc_id: ((version, document.text), *self._rechunk(doc_id, version, document))
                for doc_id, version, document in self.shard.iter_documents()}  # fmt: skip
        written = 0
        with self.shard.rewrite(manifest) as writer:
            for doc_id, version, document in self.shard.iter_documents():
                if done.get(doc_id, (None,))[0] != (version, document.text):  # written since
                    done[doc_id] = ((version, document.text),
                                    *self._rechunk(doc_id, version, document))  # fmt: skip
                _, chunks, vectors = done[doc_id]
                writer.write(doc_id, document.file_name, chunks, vectors)
                written += len(chunks)
        return written

    def _rechunk(
        self, doc_id: str, version: int, document: Document
    ) -> tuple[list[Chunk], np.ndarray]:
        chunks = self.chunker.chunk(
            document, tenant=self.shard.tenant, doc_id=doc_id, version=version
        )
        return chunks, self.embedder.embed_documents([c.text for c in chunks])
