"""TenantShard: one tenant's documents, chunks, vectors and lexical index.

SQLite (WAL) is the source of truth: documents with their validated text and structure, chunks
with offsets and float32 embeddings, and an FTS5 table kept in step by triggers. The FAISS index
is derived from the stored vectors: it is saved as ``vectors-<generation>.faiss`` and rebuilt
whenever that file is missing, unreadable, or behind the database's generation counter. A write
is acknowledged only once its transaction commits, so a crash loses no acknowledged document.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from index.config import VectorIndexConfig
from index.embedding import validate_vectors
from index.errors import DocumentNotFoundError, EmbedderChangedError, EmbedderMismatchError
from index.screening import FlaggedPassage, find_instructions
from index.store.schema import BM25_WEIGHTS, SCHEMA, SCHEMA_VERSION, fts_query
from index.store.vectors import VectorIndex
from index.types import Block, Chunk, Document, DocumentRecord, SearchHit

log = logging.getLogger(__name__)

DB_NAME = "shard.sqlite3"
METRIC = "inner_product"
NORMALIZATION = "l2"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What built the shard's vectors; a shard refuses an embedder that does not match."""

    embedder_model_id: str
    dimension: int
    chunker_version: str
    metric: str = METRIC
    normalization: str = NORMALIZATION
    schema_version: str = SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """A loaded, chunked and embedded document, ready to be written in one transaction."""

    doc_id: str
    source: str
    document: Document
    content_hash: str
    byte_count: int
    version: int
    chunks: Sequence[Chunk]
    vectors: np.ndarray
    attributes: dict[str, str] = field(default_factory=dict)
    flagged: Sequence[FlaggedPassage] = ()
    loader_version: str = ""  # the loaders' version that read ``document`` from the bytes


class StoredVersion(NamedTuple):
    version: int
    content_hash: str  # sha256 of the file's bytes
    loader_version: str  # "" for documents stored before loader versions were recorded


@dataclass(frozen=True, slots=True)
class ShardStats:
    tenant: str
    documents: int
    chunks: int
    vectors: int
    index_kind: str
    generation: int
    disk_bytes: int
    manifest: Manifest


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class TenantShard:
    """Open with ``start()``; every method after that is thread-safe."""

    def __init__(
        self, directory: Path, tenant: str, manifest: Manifest, vectors: VectorIndexConfig
    ):
        self.directory = directory
        self.tenant = tenant
        self.manifest = manifest
        self.vector_config = vectors
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._vectors: VectorIndex | None = None
        self._vectors_generation = -1
        self._saved_generation = -1

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, *, accept: Collection[str] = (), adopt_manifest: bool = False) -> TenantShard:
        """Open (creating if new) the database, check the manifest, load or rebuild vectors.

        A new shard is built with ``manifest``. An existing one keeps the embedder that built
        it when that model is ``manifest``'s or in ``accept`` (the other configured
        embedders); ``adopt_manifest`` accepts any (its vectors are then not loaded: only
        ``grounded reindex`` may follow).
        """
        with self._lock:
            if self._db is not None:
                return self
            self.directory.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.directory / DB_NAME, isolation_level=None, check_same_thread=False, timeout=30
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
            _add_flags_column(db)
            _add_loader_version_column(db)
            self._db = db
            if self._check_manifest(accept, adopt_manifest):
                self._sync_vectors()
        return self

    def close(self) -> None:
        with self._lock:
            if self._db is None:
                return
            self.flush()
            self._db.close()
            self._db = None
            self._vectors = None

    def _check_manifest(self, accept: Collection[str], adopt: bool) -> bool:
        """True when the shard may be served: new, or built by an available embedder."""
        stored = _stored_manifest(self._conn)
        if stored is None:
            self._write_manifest(self.manifest)
            return True
        same = (stored.embedder_model_id, stored.dimension)
        if same == (self.manifest.embedder_model_id, self.manifest.dimension):
            return True
        if stored.embedder_model_id in accept:
            self.manifest = stored  # served with the model that built it until reindexed
            return True
        if adopt:
            self.manifest = stored  # what the stored vectors are, until rewrite() replaces them
            return False
        raise EmbedderMismatchError(
            f"tenant {self.tenant!r} was indexed with {stored.embedder_model_id} "
            f"({stored.dimension}-d) but the configured embedder is "
            f"{self.manifest.embedder_model_id} ({self.manifest.dimension}-d): configure "
            f"{stored.embedder_model_id} again (index.embedder or index.embedders), or run "
            f"`grounded reindex --tenant {self.tenant}` to re-embed with the new model",
            param="index.embedder.model",
        )

    def _write_manifest(self, manifest: Manifest) -> None:
        with self._transaction() as db:
            _store_manifest(db, manifest)
            db.execute("INSERT OR IGNORE INTO manifest(key, value) VALUES ('generation', '0')")

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"shard {self.tenant!r} is not started; call start() first")
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._conn
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The shard's connection inside one transaction under the shard's lock, for tables
        kept in the same database (``index/store/collections.py``). ``write`` takes SQLite's
        write lock up front (``BEGIN IMMEDIATE``) and rolls back on error; a read sees one
        consistent snapshot."""
        if write:
            with self._transaction() as db:
                yield db
            return
        with self._lock:
            db = self._conn
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def generation(self) -> int:
        row = self._conn.execute("SELECT value FROM manifest WHERE key='generation'").fetchone()
        return int(row[0]) if row else 0

    def _bump_generation(self, db: sqlite3.Connection) -> int:
        db.execute("UPDATE manifest SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")
        return int(db.execute("SELECT value FROM manifest WHERE key='generation'").fetchone()[0])

    # -- vectors (derived) ---------------------------------------------------------------------

    def _vector_path(self, generation: int) -> Path:
        return self.directory / f"vectors-{generation}.faiss"

    def _sync_vectors(self) -> None:
        """Make the in-memory index match the database: load the saved file, else rebuild."""
        generation = self.generation()
        if self._vectors is not None and self._vectors_generation == generation:
            return
        if self._vectors is not None:  # another writer committed: a reindex may have moved it
            self.manifest = _stored_manifest(self._conn) or self.manifest
        count = self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        path = self._vector_path(generation)
        reason = "missing"
        if path.exists():
            try:
                loaded = VectorIndex.load(path, self.manifest.dimension, self.vector_config)
                if loaded.ntotal == count:
                    self._vectors, self._vectors_generation = loaded, generation
                    self._saved_generation = generation
                    return
                reason = f"holds {loaded.ntotal} vectors, database has {count}"
            except ValueError as exc:
                reason = str(exc)
        log.info(
            "rebuilding vectors of tenant %s (generation %d): %s", self.tenant, generation, reason
        )
        self._rebuild_vectors(generation)

    def _rebuild_vectors(self, generation: int) -> None:
        ids, vectors = self.stored_vectors()
        self._vectors = VectorIndex.build(self.manifest.dimension, self.vector_config, ids, vectors)
        self._vectors_generation = generation

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """All (chunk row ids, embeddings) from the database, in id order."""
        rows = self._conn.execute("SELECT id, embedding FROM chunks ORDER BY id").fetchall()
        dimension = self.manifest.dimension
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return ids, vectors.reshape(len(rows), dimension).copy()

    def flush(self) -> None:
        """Retrain if the index outgrew its type, then save it for this generation."""
        with self._lock:
            self._sync_vectors()
            if self._vectors.needs_retrain():
                self._rebuild_vectors(self._vectors_generation)
            if self._saved_generation == self._vectors_generation:
                return
            self._vectors.save(self._vector_path(self._vectors_generation))
            self._saved_generation = self._vectors_generation
            for old in self.directory.glob("vectors-*.faiss"):
                if old != self._vector_path(self._saved_generation):
                    old.unlink(missing_ok=True)

    # -- writes --------------------------------------------------------------------------------

    def current_version(self, doc_id: str) -> StoredVersion | None:
        """The version, content hash and loader version of a stored document, or None."""
        row = self._conn.execute(
            "SELECT version, content_hash, loader_version FROM documents WHERE doc_id = ?",
            (doc_id,),
        ).fetchone()
        return StoredVersion(*row) if row else None

    def write_documents(
        self, prepared: Sequence[PreparedDocument], model_id: str | None = None
    ) -> list[Literal["added", "replaced"]]:
        """Insert or replace documents and their chunks in one transaction. ``model_id`` (the
        vectors' model) must be the shard's once it is in step with the database: a reindex
        may have moved it since the caller embedded (EmbedderChangedError: embed again)."""
        if not prepared:
            return []
        with self._lock:
            self._sync_vectors()
            self._check_model(model_id)
            dimension = self.manifest.dimension
            vectors = [validate_vectors(i.vectors, dimension, f"vectors of {i.source}")
                       for i in prepared]  # fmt: skip
            removed: list[int] = []
            added: list[int] = []
            statuses: list[Literal["added", "replaced"]] = []
            with self._transaction() as db:
                behind = self.generation() != self._vectors_generation  # another writer
                for item, item_vectors in zip(prepared, vectors, strict=True):
                    created = db.execute(
                        "SELECT created_at FROM documents WHERE doc_id = ?", (item.doc_id,)
                    ).fetchone()
                    old = self._delete_rows(db, item.doc_id, keep_document=True)
                    removed.extend(old or [])
                    statuses.append("replaced" if old is not None else "added")
                    added.extend(self._insert(db, item, item_vectors, created and created[0]))
                generation = self._bump_generation(db)
            self._apply(generation, behind, removed, added, np.vstack(vectors))
        return statuses

    def _apply(
        self, generation: int, behind: bool, removed: list[int], added: list[int], vectors
    ) -> None:
        """Mirror a committed write in the vector index (rebuild if it missed another's)."""
        if behind:
            self._rebuild_vectors(generation)
            return
        self._vectors.remove(np.asarray(removed, dtype=np.int64))
        if added:
            self._vectors.add(np.asarray(added, dtype=np.int64), vectors)
        self._vectors_generation = generation

    def _delete_rows(
        self, db: sqlite3.Connection, doc_id: str, *, keep_document: bool = False
    ) -> list[int] | None:
        """Delete a document's rows; its chunk ids, or None if there was no such document.

        ``keep_document`` (a replacement) deletes only the chunks: the row is then updated in
        place, since deleting it would cascade to the rows that reference it (vector-store
        memberships)."""
        if db.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone() is None:
            return None
        ids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))]
        db.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        if not keep_document:
            db.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        return ids

    def _insert(
        self,
        db: sqlite3.Connection,
        item: PreparedDocument,
        vectors: np.ndarray,
        created_at: str | None,
    ) -> list[int]:
        doc, now = item.document, _now()
        blocks = [[b.start, b.end, b.kind, list(b.heading_path), b.page] for b in doc.blocks]
        db.execute(
            "INSERT INTO documents(doc_id, source, file_name, media_type, content_hash, version,"
            " text, blocks, byte_count, page_count, attributes, created_at, updated_at, flags,"
            " loader_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT(doc_id) DO UPDATE SET {_REPLACED_COLUMNS}",
            (
                item.doc_id,
                item.source,
                doc.file_name,
                doc.media_type,
                item.content_hash,
                item.version,
                doc.text,
                json.dumps(blocks),
                item.byte_count,
                doc.page_count,
                json.dumps(item.attributes, sort_keys=True),
                created_at or now,
                now,
                _flags_json(item.flagged),
                item.loader_version,
            ),
        )
        return _insert_chunks(db, doc.file_name, item.chunks, vectors)

    def delete_document(self, doc_id: str) -> None:
        """Remove a document (or an upload still being ingested or refused) from the
        database, its vector-store memberships and the vector index; 404 if absent."""
        with self._lock:
            self._sync_vectors()
            with self._transaction() as db:
                behind = self.generation() != self._vectors_generation
                removed = self._delete_rows(db, doc_id)
                uploaded = db.execute("DELETE FROM uploads WHERE doc_id = ?", (doc_id,)).rowcount
                db.execute("DELETE FROM originals WHERE doc_id = ?", (doc_id,))
                if removed is None and not uploaded:
                    raise DocumentNotFoundError(
                        f"no document {doc_id!r} in tenant {self.tenant!r}; "
                        "`grounded docs` lists the ids"
                    )
                db.execute("DELETE FROM vector_store_files WHERE doc_id = ?", (doc_id,))
                generation = self._bump_generation(db)
            self._apply(generation, behind, removed or [], [], None)

    @contextmanager
    def rewrite(self, manifest: Manifest) -> Iterator[_Rewriter]:
        """Replace every chunk and the manifest in one transaction (``reindex``)."""
        with self._lock:
            with self._transaction() as db:
                db.execute("DELETE FROM chunks")
                yield _Rewriter(db, manifest.dimension)
                _store_manifest(db, manifest)
                generation = self._bump_generation(db)
            self.manifest = manifest
            self._rebuild_vectors(generation)
            self.flush()

    # -- reads ---------------------------------------------------------------------------------

    def list_documents(self) -> list[DocumentRecord]:
        rows = self._conn.execute(
            f"SELECT {_DOC_COLUMNS} FROM documents d ORDER BY d.file_name, d.doc_id"
        ).fetchall()
        return [_record(row) for row in rows]

    def get_document(self, doc_id: str) -> DocumentRecord:
        row = self._conn.execute(
            f"SELECT {_DOC_COLUMNS} FROM documents d WHERE d.doc_id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            raise DocumentNotFoundError(f"no document {doc_id!r} in tenant {self.tenant!r}")
        return _record(row)

    def document_text(self, doc_id: str) -> str:
        """The document's validated text: what chunk offsets (``start``, ``end``) index."""
        row = self._conn.execute("SELECT text FROM documents WHERE doc_id = ?", (doc_id,))
        if (found := row.fetchone()) is None:
            raise DocumentNotFoundError(f"no document {doc_id!r} in tenant {self.tenant!r}")
        return found[0]

    def iter_documents(self) -> Iterator[tuple[str, int, Document]]:
        """Stored documents (id, version, validated text and structure), for reindexing."""
        rows = self._conn.execute(
            "SELECT doc_id, version, file_name, media_type, text, blocks, page_count"
            " FROM documents ORDER BY doc_id"
        ).fetchall()
        for doc_id, version, file_name, media_type, text, blocks, page_count in rows:
            parsed = tuple(Block(s, e, k, tuple(h), p) for s, e, k, h, p in json.loads(blocks))
            yield doc_id, version, Document(file_name, media_type, text, parsed, page_count)

    def matching_doc_ids(
        self,
        doc_ids: Collection[str] | None = None,
        file_names: Collection[str] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> list[str]:
        """Ids of this tenant's documents matching every given condition (a filter can only
        narrow a search: ids of other tenants simply do not exist here)."""
        sql, params = "SELECT doc_id FROM documents WHERE 1=1", []
        for column, values in (("doc_id", doc_ids), ("file_name", file_names)):
            if values is not None:
                values = list(values)
                sql += f" AND {column} IN ({','.join('?' * len(values))})"
                params += values
        for key, value in (attributes or {}).items():
            sql += " AND json_extract(attributes, ?) = ?"
            params += ["$." + json.dumps(key), value]
        return [row[0] for row in self._conn.execute(sql, params)]

    def search_dense(
        self,
        query: np.ndarray,
        k: int,
        doc_ids: Collection[str] | None = None,
        model_id: str | None = None,
    ) -> list[SearchHit]:
        """Top-``k`` chunks by cosine similarity; ``doc_ids`` restricts (exactly) to documents.
        ``model_id`` (the query vector's model) must be the shard's: a reindex may have moved
        it since the caller chose its embedder (EmbedderChangedError: embed again)."""
        with self._lock:
            self._sync_vectors()
            self._check_model(model_id)
            vector = validate_vectors(query, self.manifest.dimension, "query vector")
            if doc_ids is not None:
                scored = self._exact_within(vector[0], list(doc_ids), k)
            else:
                scores, ids = self._vectors.search(vector, k)
                pairs = zip(ids[0], scores[0], strict=True)
                scored = [(int(i), float(s)) for i, s in pairs if i >= 0]
            hits = self._hits([i for i, _ in scored])
        # Ids whose rows are gone (tombstones) are simply not returned.
        return [_replace_score(hits[i], dense=s) for i, s in scored if i in hits]

    def _check_model(self, model_id: str | None) -> None:
        if model_id is not None and model_id != self.manifest.embedder_model_id:
            raise EmbedderChangedError(
                f"tenant {self.tenant!r} is now indexed with {self.manifest.embedder_model_id}, "
                f"not {model_id} (a reindex moved it); embed again with it and retry"
            )

    def _exact_within(self, vector: np.ndarray, doc_ids: list[str], k: int):
        if not doc_ids:
            return []
        marks = ",".join("?" * len(doc_ids))
        rows = self._conn.execute(
            f"SELECT id, embedding FROM chunks WHERE doc_id IN ({marks})", doc_ids
        ).fetchall()
        if not rows:
            return []
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        scores = matrix.reshape(len(rows), -1) @ vector
        order = np.argsort(-scores, kind="stable")[:k]
        return [(rows[i][0], float(scores[i])) for i in order]

    def search_lexical(
        self, text: str, k: int, doc_ids: Collection[str] | None = None
    ) -> list[SearchHit]:
        """Top-``k`` chunks by FTS5 BM25 (negated so that higher is better)."""
        expression = fts_query(text)
        if expression is None or (doc_ids is not None and not doc_ids):
            return []
        weights = ", ".join(str(w) for w in BM25_WEIGHTS)
        sql = (
            f"SELECT c.id, bm25(chunks_fts, {weights}) AS rank FROM chunks_fts"
            " JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ?"
        )
        params: list = [expression]
        if doc_ids is not None:
            sql += f" AND c.doc_id IN ({','.join('?' * len(doc_ids))})"
            params.extend(doc_ids)
        sql += " ORDER BY rank LIMIT ?"
        params.append(k)
        with self._lock:
            scored = [(row[0], -float(row[1])) for row in self._conn.execute(sql, params)]
            hits = self._hits([i for i, _ in scored])
        return [_replace_score(hits[i], bm25=s) for i, s in scored if i in hits]

    def _hits(self, ids: list[int]) -> dict[int, SearchHit]:
        if not ids:
            return {}
        rows = self._conn.execute(
            "SELECT c.id, c.chunk_id, c.doc_id, d.file_name, c.heading_path, c.page, c.start,"
            " c.end, c.text, d.flags FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
            f" WHERE c.id IN ({','.join('?' * len(ids))})",
            ids,
        ).fetchall()
        hits = {}
        for row in rows:
            flagged = _flags_within(json.loads(row[9]), row[6], row[7])
            hits[row[0]] = SearchHit(row[1], row[2], row[3], tuple(json.loads(row[4])),
                                     *row[5:9], flagged=flagged)  # fmt: skip
        return hits

    def stats(self) -> ShardStats:
        with self._lock:
            self._sync_vectors()
            documents = self._conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
            chunks = self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            disk = sum(p.stat().st_size for p in self.directory.iterdir() if p.is_file())
            return ShardStats(
                self.tenant,
                documents,
                chunks,
                self._vectors.ntotal,
                self._vectors.kind,
                self.generation(),
                disk,
                self.manifest,
            )


_DOC_COLUMNS = (
    "d.doc_id, d.source, d.file_name, d.media_type, d.content_hash, d.version,"
    " (SELECT COUNT(*) FROM chunks c WHERE c.doc_id = d.doc_id), length(d.text), d.byte_count,"
    " d.page_count, d.created_at, d.updated_at, d.attributes, d.flags"
)


# A replaced document keeps its row (and created_at); everything else is rewritten.
_REPLACED_COLUMNS = ", ".join(
    f"{column} = excluded.{column}"
    for column in (
        "source", "file_name", "media_type", "content_hash", "version", "text", "blocks",
        "byte_count", "page_count", "attributes", "updated_at", "flags", "loader_version",
    )
)  # fmt: skip


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest of the shard in ``directory`` (read-only), None when there is none yet."""
    path = directory / DB_NAME
    if not path.is_file():
        return None
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        try:
            return _stored_manifest(db)
        except sqlite3.OperationalError:  # created but its tables not yet written
            return None


def _stored_manifest(db: sqlite3.Connection) -> Manifest | None:
    stored = dict(db.execute("SELECT key, value FROM manifest").fetchall())
    if "embedder_model_id" not in stored:
        return None
    fields = {key: stored[key] for key in Manifest.__dataclass_fields__ if key in stored}
    return Manifest(**{**fields, "dimension": int(fields["dimension"])})


def _store_manifest(db: sqlite3.Connection, manifest: Manifest) -> None:
    rows = [(key, str(getattr(manifest, key))) for key in Manifest.__dataclass_fields__]
    db.executemany("INSERT OR REPLACE INTO manifest(key, value) VALUES (?, ?)", rows)


def _record(row: tuple) -> DocumentRecord:
    flagged = tuple((start, end, reason) for start, end, reason in json.loads(row[-1]))
    return DocumentRecord(*row[:-2], attributes=json.loads(row[-2]), flagged=flagged)


def _flags_within(flags: list, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The stored flags ([start, end, reason] in the document) that overlap the chunk
    ``start``..``end``, as offsets into the chunk's text."""
    return tuple(
        (max(a, start) - start, min(b, end) - start) for a, b, _ in flags if a < end and start < b
    )


def _flags_json(flagged: Sequence[FlaggedPassage]) -> str:
    return json.dumps([[f.start, f.end, f.reason] for f in flagged])


def _add_flags_column(db: sqlite3.Connection) -> None:
    """Shards written before instruction screening: add the column and screen every stored
    document once (idempotent)."""
    if "flags" in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("ALTER TABLE documents ADD COLUMN flags TEXT NOT NULL DEFAULT '[]'")
        for doc_id, text in db.execute("SELECT doc_id, text FROM documents").fetchall():
            flags = _flags_json(find_instructions(text))
            db.execute("UPDATE documents SET flags = ? WHERE doc_id = ?", (flags, doc_id))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _add_loader_version_column(db: sqlite3.Connection) -> None:
    """Shards written before loader versions were recorded: add the column, empty (an older
    loader than any), so that each document is read again when its file is ingested again."""
    if "loader_version" not in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN loader_version TEXT NOT NULL DEFAULT ''")


def _replace_score(hit: SearchHit, *, dense: float | None = None, bm25: float | None = None):
    return replace(hit, dense_score=dense, bm25_score=bm25)


def _insert_chunks(
    db: sqlite3.Connection, file_name: str, chunks: Sequence[Chunk], vectors: np.ndarray
) -> list[int]:
    """Insert chunk rows (the FTS triggers index them); returns their row ids (FAISS ids)."""
    ids = []
    for chunk, vector in zip(chunks, vectors, strict=True):
        context = " > ".join((file_name, *chunk.heading_path))
        cursor = db.execute(
            "INSERT INTO chunks(chunk_id, doc_id, version, position, start, end, heading_path,"
            " context, page, text, token_count, embedding)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                chunk.chunk_id,
                chunk.doc_id,
                chunk.version,
                chunk.position,
                chunk.start,
                chunk.end,
                json.dumps(list(chunk.heading_path)),
                context,
                chunk.page,
                chunk.text,
                chunk.token_count,
                vector.tobytes(),
            ),
        )
        ids.append(cursor.lastrowid)
    return ids


class _Rewriter:
    """Writes re-embedded chunks of existing documents inside ``TenantShard.rewrite``."""

    def __init__(self, db: sqlite3.Connection, dimension: int) -> None:
        self._db, self._dimension = db, dimension

    def write(self, doc_id: str, file_name: str, chunks: Sequence[Chunk], vectors: np.ndarray):
        vectors = validate_vectors(vectors, self._dimension, f"vectors of {file_name}")
        _insert_chunks(self._db, file_name, chunks, vectors)
