"""TenantShard: one tenant's documents, chunks, vectors and lexical index.

SQLite (WAL) is the source of truth: documents with their validated text and structure, chunks
with offsets and float32 embeddings, and an FTS5 table kept in step by triggers. The FAISS index
is derived from the stored vectors: it is saved as ``vectors-<generation>.faiss`` and rebuilt
whenever that file is missing, unreadable, or behind the database's generation counter. A write
is acknowledged only once its transaction commits, so a crash loses no acknowledged document.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Literal

import numpy as np

from index.access import Reader
from index.config import VectorIndexConfig
from index.embedding import validate_vectors
from index.errors import DocumentNotFoundError, EmbedderChangedError, EmbedderMismatchError
from index.store.filtered import pairs, search_within
from index.store.rows import (
    DB_NAME,
    DOC_COLUMNS,
    Manifest,
    PreparedDocument,
    Rewriter,
    ShardStats,
    StoredVersion,
    access_json,
    access_of,
    hits_of,
    insert_document,
    lexical_query,
    matching_doc_ids,
    migrate_columns,
    record,
    rename_rows,
    store_manifest,
    stored_documents,
    stored_manifest,
    visible_doc_ids,
    with_score,
)
from index.store.schema import SCHEMA
from index.store.vectors import VectorIndex
from index.types import Document, DocumentRecord, SearchHit

log = logging.getLogger(__name__)


class TenantShard:
    """Open with ``start()``; every method after that is thread-safe."""

    def __init__(
        self, directory: Path, tenant: str, manifest: Manifest, vectors: VectorIndexConfig
    ):
        self.directory, self.tenant, self.manifest = directory, tenant, manifest
        self.vector_config = vectors
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._vectors: VectorIndex | None = None
        self._vectors_generation = self._saved_generation = -1

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
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON"):
                db.execute(f"PRAGMA {pragma}")
            _migrate(db)
            self._db = db
            if self._check_manifest(accept, adopt_manifest):
                self._sync_vectors()
        return self

    def replace_with(self, copy: Path) -> None:
        """Become the database at ``copy`` (a snapshot), in place; the vector index then
        rebuilt from its vectors. Readers see the shard before or after."""
        with self._lock:
            with closing(sqlite3.connect(copy)) as source:
                source.backup(self._conn)
            _migrate(self._conn)  # a copy from an older release
            for old in self.directory.glob("vectors-*.faiss"):  # the copy before's
                old.unlink(missing_ok=True)
            self.manifest = stored_manifest(self._conn) or self.manifest
            self._vectors, self._saved_generation = None, -1
            self._sync_vectors()

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
        stored = stored_manifest(self._conn)
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
        with self.transaction(write=True) as db:
            store_manifest(db, manifest)
            db.execute("INSERT OR IGNORE INTO manifest(key, value) VALUES ('generation', '0')")

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"shard {self.tenant!r} is not started; call start() first")
        return self._db

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The shard's connection inside one transaction under the shard's lock, for tables
        kept in the same database (``index/store/collections.py``). ``write`` takes SQLite's
        write lock up front (``BEGIN IMMEDIATE``); an error rolls back; a read sees one
        consistent snapshot."""
        with self._lock:
            db = self._conn
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Reads that see no write between them (who may read what, then the searches)."""
        with self._lock:
            yield

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
            self.manifest = stored_manifest(self._conn) or self.manifest
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
        """The version, content hash, loader version and access of a stored document, or
        None."""
        row = self._conn.execute(
            "SELECT version, content_hash, loader_version, access FROM documents WHERE doc_id = ?",
            (doc_id,),
        ).fetchone()
        return StoredVersion(*row[:3], access_of(row[3])) if row else None

    def set_access(self, doc_id: str, access: tuple[str, ...] | None) -> None:
        """Who may read a stored document (index/access.py), from the next search on: the
        list is read at each search, nothing is embedded again. 404 if absent."""
        with self._lock, self.transaction(write=True) as db:
            changed = db.execute(
                "UPDATE documents SET access = ? WHERE doc_id = ?", (access_json(access), doc_id)
            ).rowcount
            if not changed:
                raise self._absent(doc_id)

    def rename_document(self, doc_id: str, file_name: str, source: str) -> None:
        """A moved file's new name and source, nothing embedded again; 404 if absent."""
        with self.transaction(write=True) as db:
            if not rename_rows(db, doc_id, file_name, source):
                raise self._absent(doc_id)

    def visible_doc_ids(self, reader: Reader) -> list[str] | None:
        """The documents ``reader`` may read; None: all (an admin, or none is hidden)."""
        return None if reader.admin else visible_doc_ids(self._conn, reader)

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
            with self.transaction(write=True) as db:
                behind = self.generation() != self._vectors_generation  # another writer
                for item, item_vectors in zip(prepared, vectors, strict=True):
                    created = db.execute(
                        "SELECT created_at FROM documents WHERE doc_id = ?", (item.doc_id,)
                    ).fetchone()
                    old = self._delete_rows(db, item.doc_id, keep_document=True)
                    removed.extend(old or [])
                    statuses.append("replaced" if old is not None else "added")
                    added.extend(insert_document(db, item, item_vectors, created and created[0]))
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

    def delete_document(self, doc_id: str) -> None:
        """Remove a document (or an upload still being ingested or refused) from the
        database, its vector-store memberships and the vector index; 404 if absent."""
        with self._lock:
            self._sync_vectors()
            with self.transaction(write=True) as db:
                behind = self.generation() != self._vectors_generation
                removed = self._delete_rows(db, doc_id)
                uploaded = db.execute("DELETE FROM uploads WHERE doc_id = ?", (doc_id,)).rowcount
                db.execute("DELETE FROM originals WHERE doc_id = ?", (doc_id,))
                if removed is None and not uploaded:
                    raise self._absent(doc_id)
                db.execute("DELETE FROM vector_store_files WHERE doc_id = ?", (doc_id,))
                generation = self._bump_generation(db)
            self._apply(generation, behind, removed or [], [], None)

    @contextmanager
    def rewrite(self, manifest: Manifest) -> Iterator[Rewriter]:
        """Replace every chunk and the manifest in one transaction (``reindex``)."""
        with self._lock:
            with self.transaction(write=True) as db:
                db.execute("DELETE FROM chunks")
                yield Rewriter(db, manifest.dimension)
                store_manifest(db, manifest)
                generation = self._bump_generation(db)
            self.manifest = manifest
            self._rebuild_vectors(generation)
            self.flush()

    # -- reads ---------------------------------------------------------------------------------

    def list_documents(self) -> list[DocumentRecord]:
        rows = self._conn.execute(
            f"SELECT {DOC_COLUMNS} FROM documents d ORDER BY d.file_name, d.doc_id"
        ).fetchall()
        return [record(row) for row in rows]

    def get_document(self, doc_id: str) -> DocumentRecord:
        row = self._conn.execute(
            f"SELECT {DOC_COLUMNS} FROM documents d WHERE d.doc_id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            raise self._absent(doc_id)
        return record(row)

    def document_text(self, doc_id: str) -> str:
        """The document's validated text: what chunk offsets (``start``, ``end``) index."""
        row = self._conn.execute("SELECT text FROM documents WHERE doc_id = ?", (doc_id,))
        if (found := row.fetchone()) is None:
            raise self._absent(doc_id)
        return found[0]

    def _absent(self, doc_id: str) -> DocumentNotFoundError:
        return DocumentNotFoundError(
            f"no document {doc_id!r} in tenant {self.tenant!r}; `grounded docs` lists the ids"
        )

    def iter_documents(self) -> Iterator[tuple[str, int, Document]]:
        """Stored documents (id, version, validated text and structure), for reindexing."""
        return stored_documents(self._conn)

    def matching_doc_ids(
        self,
        doc_ids: Collection[str] | None = None,
        file_names: Collection[str] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> list[str]:
        """Ids of this tenant's documents matching every given condition (a filter can only
        narrow a search: ids of other tenants simply do not exist here)."""
        return matching_doc_ids(self._conn, doc_ids, file_names, attributes)

    def search_dense(
        self,
        query: np.ndarray,
        k: int,
        doc_ids: Collection[str] | None = None,
        model_id: str | None = None,
    ) -> list[SearchHit]:
        """Top-``k`` chunks by cosine similarity; ``doc_ids`` restricts to documents, before
        the top ``k`` is taken (access lists, filters). ``model_id`` (the query vector's model)
        must be the shard's: a reindex may have moved it since the caller chose its embedder
        (EmbedderChangedError: embed again)."""
        with self._lock:
            self._sync_vectors()
            self._check_model(model_id)
            vector = validate_vectors(query, self.manifest.dimension, "query vector")
            if doc_ids is None:
                scored = pairs(*self._vectors.search(vector, k))
            else:
                scored = search_within(self._conn, self._vectors, vector, list(doc_ids), k)
            hits = hits_of(self._conn, [i for i, _ in scored])
        # Ids whose rows are gone (tombstones) are simply not returned.
        return [with_score(hits[i], dense=s) for i, s in scored if i in hits]

    def _check_model(self, model_id: str | None) -> None:
        if model_id is not None and model_id != self.manifest.embedder_model_id:
            raise EmbedderChangedError(
                f"tenant {self.tenant!r} is now indexed with {self.manifest.embedder_model_id}, "
                f"not {model_id} (a reindex moved it); embed again with it and retry"
            )

    def search_lexical(
        self, text: str, k: int, doc_ids: Collection[str] | None = None
    ) -> list[SearchHit]:
        """Top-``k`` chunks by FTS5 BM25 (negated so that higher is better)."""
        query = lexical_query(text, k, doc_ids)
        if query is None:
            return []
        with self._lock:
            scored = [(row[0], -float(row[1])) for row in self._conn.execute(*query)]
            hits = hits_of(self._conn, [i for i, _ in scored])
        return [with_score(hits[i], bm25=s) for i, s in scored if i in hits]

    def stats(self) -> ShardStats:
        with self._lock:
            self._sync_vectors()
            documents = self._conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
            chunks = self._conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            disk = sum(p.stat().st_size for p in self.directory.iterdir() if p.is_file())
            return ShardStats(self.tenant, documents, chunks, self._vectors.ntotal,
                              self._vectors.kind, self.generation(), disk,
                              self.manifest)  # fmt: skip


def _migrate(db: sqlite3.Connection) -> None:
    """The schema, and the columns added since the first release."""
    db.executescript(SCHEMA)
    migrate_columns(db)
