"""How a shard's tables are read and written: its manifest, document and chunk rows, the
instruction flags stored with a document, and the SQL its searches run. TenantShard
(index/store/shard.py) holds the lock and the connection; these take the connection."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from index.access import Reader
from index.embedding import validate_vectors
from index.screening import FlaggedPassage, find_instructions
from index.store.schema import BM25_WEIGHTS, SCHEMA_VERSION, fts_query
from index.types import Block, Chunk, Document, DocumentRecord, SearchHit

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
    access: tuple[str, ...] | None = None  # who may read it (index/access.py); None: the tenant
    owner: str | None = None  # who created it (index/access.py); kept by later versions
    keep_access: bool = False  # a new version that keeps the stored list (as it is at commit)


class StoredVersion(NamedTuple):
    version: int
    content_hash: str  # sha256 of the file's bytes
    loader_version: str  # "" for documents stored before loader versions were recorded
    access: tuple[str, ...] | None = None  # who may read it (index/access.py)


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


DOC_COLUMNS = (
    "d.doc_id, d.source, d.file_name, d.media_type, d.content_hash, d.version,"
    " (SELECT COUNT(*) FROM chunks c WHERE c.doc_id = d.doc_id), length(d.text), d.byte_count,"
    " d.page_count, d.created_at, d.updated_at, d.attributes, d.flags, d.access, d.owner"
)


# A replaced document keeps its row (and created_at); everything else is rewritten, its
# access list too unless the new version keeps it (then the list stored when the write commits
# stays: a change made while the version was embedded is not undone).
REPLACED = (
    "source", "file_name", "media_type", "content_hash", "version", "text", "blocks",
    "byte_count", "page_count", "attributes", "updated_at", "flags", "loader_version",
)  # fmt: skip
REPLACED_COLUMNS = ", ".join(f"{column} = excluded.{column}" for column in (*REPLACED, "access"))
KEPT_ACCESS_COLUMNS = ", ".join(f"{column} = excluded.{column}" for column in REPLACED)


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest of the shard in ``directory`` (read-only), None when there is none yet."""
    path = directory / DB_NAME
    if not path.is_file():
        return None
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        try:
            return stored_manifest(db)
        except sqlite3.OperationalError:  # created but its tables not yet written
            return None


def stored_manifest(db: sqlite3.Connection) -> Manifest | None:
    stored = dict(db.execute("SELECT key, value FROM manifest").fetchall())
    if "embedder_model_id" not in stored:
        return None
    fields = {key: stored[key] for key in Manifest.__dataclass_fields__ if key in stored}
    return Manifest(**{**fields, "dimension": int(fields["dimension"])})


def store_manifest(db: sqlite3.Connection, manifest: Manifest) -> None:
    rows = [(key, str(getattr(manifest, key))) for key in Manifest.__dataclass_fields__]
    db.executemany("INSERT OR REPLACE INTO manifest(key, value) VALUES (?, ?)", rows)


def record(row: tuple) -> DocumentRecord:
    *fields, attributes, flags, access, owner = row
    flagged = tuple((start, end, reason) for start, end, reason in json.loads(flags))
    return DocumentRecord(*fields, attributes=json.loads(attributes), flagged=flagged,
                          access=access_of(access), owner=owner)  # fmt: skip


def access_of(stored: str | None) -> tuple[str, ...] | None:
    return None if stored is None else tuple(json.loads(stored))


def access_json(access: tuple[str, ...] | None) -> str | None:
    return None if access is None else json.dumps(sorted(access))


def flags_within(flags: list, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The stored flags ([start, end, reason] in the document) that overlap the chunk
    ``start``..``end``, as offsets into the chunk's text."""
    return tuple(
        (max(a, start) - start, min(b, end) - start) for a, b, _ in flags if a < end and start < b
    )


def flags_json(flagged: Sequence[FlaggedPassage]) -> str:
    return json.dumps([[f.start, f.end, f.reason] for f in flagged])


def add_flags_column(db: sqlite3.Connection) -> None:
    """Shards written before instruction screening: add the column and screen every stored
    document once (idempotent)."""
    if "flags" in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("ALTER TABLE documents ADD COLUMN flags TEXT NOT NULL DEFAULT '[]'")
        for doc_id, text in db.execute("SELECT doc_id, text FROM documents").fetchall():
            flags = flags_json(find_instructions(text))
            db.execute("UPDATE documents SET flags = ? WHERE doc_id = ?", (flags, doc_id))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def add_access_column(db: sqlite3.Connection) -> None:
    """Shards written before access lists: add the columns, NULL (every document readable by
    the whole tenant, as it was; an upload keeps the list of the document it replaces)."""
    for table in ("documents", "uploads"):
        if "access" not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN access TEXT")


def add_owner_columns(db: sqlite3.Connection) -> None:
    """Shards written before owners were recorded: add the columns, NULL (what was stored
    then is changed by admins only: index/access.py)."""
    for table in ("documents", "uploads", "vector_stores"):
        if "owner" not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT")


def add_source_version_column(db: sqlite3.Connection) -> None:
    """Shards whose sources were declared before remote kinds: the files' ETag column."""
    if "version" not in {row[1] for row in db.execute("PRAGMA table_info(source_files)")}:
        db.execute("ALTER TABLE source_files ADD COLUMN version TEXT NOT NULL DEFAULT ''")


def migrate_columns(db: sqlite3.Connection) -> None:
    """The columns added since the first release, added to a shard written before them."""
    for add in (add_flags_column, add_loader_version_column, add_access_column,
                add_owner_columns, add_source_version_column):  # fmt: skip
        add(db)


def readable_sql(reader: Reader, table: str) -> tuple[str, list[str]]:
    """A SQL condition (and its parameters) true for the rows of ``table`` (an alias of
    ``documents`` or ``uploads``: their ``access`` column) that ``reader`` may read:
    ``Reader.may_read`` in SQL, so that a filter applies before any LIMIT or count."""
    if reader.admin:
        return "1", []
    principals = sorted(reader.principals)
    if not principals:
        return f"({table}.access IS NULL)", []
    marks = ",".join("?" * len(principals))
    held = f"EXISTS (SELECT 1 FROM json_each({table}.access) WHERE value IN ({marks}))"
    return f"({table}.access IS NULL OR {held})", principals


def add_loader_version_column(db: sqlite3.Connection) -> None:
    """Shards written before loader versions were recorded: add the column, empty (an older
    loader than any), so that each document is read again when its file is ingested again."""
    if "loader_version" not in {row[1] for row in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN loader_version TEXT NOT NULL DEFAULT ''")


def with_score(hit: SearchHit, *, dense: float | None = None, bm25: float | None = None):
    return replace(hit, dense_score=dense, bm25_score=bm25)


def insert_document(
    db: sqlite3.Connection, item: PreparedDocument, vectors: np.ndarray, created_at: str | None
) -> list[int]:
    """Insert (or replace in place) a document's row and its chunks; returns the chunks' row
    ids (their FAISS ids). A replaced document keeps its ``created_at``."""
    doc, now = item.document, datetime.now(UTC).isoformat(timespec="seconds")
    blocks = [[b.start, b.end, b.kind, list(b.heading_path), b.page] for b in doc.blocks]
    db.execute(
        "INSERT INTO documents(doc_id, source, file_name, media_type, content_hash, version,"
        " text, blocks, byte_count, page_count, attributes, created_at, updated_at, flags,"
        " loader_version, access, owner)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(doc_id) DO UPDATE SET "
        + (KEPT_ACCESS_COLUMNS if item.keep_access else REPLACED_COLUMNS),
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
            flags_json(item.flagged),
            item.loader_version,
            access_json(item.access),
            item.owner,
        ),
    )
    return insert_chunks(db, doc.file_name, item.chunks, vectors)


def insert_chunks(
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


class Rewriter:
    """Writes re-embedded chunks of existing documents inside ``TenantShard.rewrite``."""

    def __init__(self, db: sqlite3.Connection, dimension: int) -> None:
        self._db, self._dimension = db, dimension

    def write(self, doc_id: str, file_name: str, chunks: Sequence[Chunk], vectors: np.ndarray):
        vectors = validate_vectors(vectors, self._dimension, f"vectors of {file_name}")
        insert_chunks(self._db, file_name, chunks, vectors)


def exact_within(
    db: sqlite3.Connection, vector: np.ndarray, doc_ids: list[str], k: int
) -> list[tuple[int, float]]:
    """(chunk row id, cosine) of the top ``k`` chunks of these documents, computed exactly."""
    if not doc_ids:
        return []
    marks = ",".join("?" * len(doc_ids))
    rows = db.execute(
        f"SELECT id, embedding FROM chunks WHERE doc_id IN ({marks})", doc_ids
    ).fetchall()
    if not rows:
        return []
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
    scores = matrix.reshape(len(rows), -1) @ vector
    order = np.argsort(-scores, kind="stable")[:k]
    return [(rows[i][0], float(scores[i])) for i in order]


def chunk_count(db: sqlite3.Connection, doc_ids: list[str]) -> int:
    """How many chunks these documents have."""
    if not doc_ids:
        return 0
    marks = ",".join("?" * len(doc_ids))
    return db.execute(f"SELECT COUNT(*) FROM chunks WHERE doc_id IN ({marks})", doc_ids).fetchone()[
        0
    ]


def chunk_ids_of(db: sqlite3.Connection, doc_ids: list[str]) -> np.ndarray:
    """The chunk row ids of these documents (int64, for a FAISS IDSelector)."""
    marks = ",".join("?" * len(doc_ids))
    rows = db.execute(f"SELECT id FROM chunks WHERE doc_id IN ({marks})", doc_ids)
    return np.fromiter((r[0] for r in rows), dtype=np.int64)


def chunks_of(db: sqlite3.Connection, ids: list[int], doc_ids: set[str]) -> set[int]:
    """Those of the chunk row ids ``ids`` that belong to one of ``doc_ids``."""
    if not ids:
        return set()
    rows = db.execute(
        f"SELECT id, doc_id FROM chunks WHERE id IN ({','.join('?' * len(ids))})", ids
    )
    return {i for i, doc_id in rows if doc_id in doc_ids}


def lexical_query(text: str, k: int, doc_ids: Collection[str] | None) -> tuple[str, list] | None:
    """The FTS5 BM25 query (SQL and parameters) for the top ``k`` chunks matching ``text``;
    None when nothing can match."""
    expression = fts_query(text)
    if expression is None or (doc_ids is not None and not doc_ids):
        return None
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
    return sql, params


def hits_of(db: sqlite3.Connection, ids: list[int]) -> dict[int, SearchHit]:
    """The search hits of these chunk row ids (those whose rows still exist)."""
    if not ids:
        return {}
    rows = db.execute(
        "SELECT c.id, c.chunk_id, c.doc_id, d.file_name, c.heading_path, c.page, c.start,"
        " c.end, c.text, d.flags FROM chunks c JOIN documents d ON d.doc_id = c.doc_id"
        f" WHERE c.id IN ({','.join('?' * len(ids))})",
        ids,
    ).fetchall()
    hits = {}
    for row in rows:
        flagged = flags_within(json.loads(row[9]), row[6], row[7])
        hits[row[0]] = SearchHit(row[1], row[2], row[3], tuple(json.loads(row[4])),
                                 *row[5:9], flagged=flagged)  # fmt: skip
    return hits


def visible_doc_ids(db: sqlite3.Connection, reader: Reader) -> list[str] | None:
    """The documents ``reader`` may read (index/access.py), or None when no document is
    hidden from it."""
    readable, params = readable_sql(reader, "d")
    hidden = db.execute(f"SELECT 1 FROM documents d WHERE NOT {readable} LIMIT 1", params)
    if hidden.fetchone() is None:
        return None
    return [d for (d,) in db.execute(f"SELECT doc_id FROM documents d WHERE {readable}", params)]


def matching_doc_ids(
    db: sqlite3.Connection,
    doc_ids: Collection[str] | None,
    file_names: Collection[str] | None,
    attributes: dict[str, str] | None,
) -> list[str]:
    """Ids of the documents matching every given condition (None: no condition)."""
    sql, params = "SELECT doc_id FROM documents WHERE 1=1", []
    for column, values in (("doc_id", doc_ids), ("file_name", file_names)):
        if values is not None:
            values = list(values)
            sql += f" AND {column} IN ({','.join('?' * len(values))})"
            params += values
    for key, value in (attributes or {}).items():
        sql += " AND json_extract(attributes, ?) = ?"
        params += ["$." + json.dumps(key), value]
    return [row[0] for row in db.execute(sql, params)]


def stored_documents(db: sqlite3.Connection) -> Iterator[tuple[str, int, Document]]:
    """Every stored document: (id, version, validated text and structure)."""
    rows = db.execute(
        "SELECT doc_id, version, file_name, media_type, text, blocks, page_count"
        " FROM documents ORDER BY doc_id"
    ).fetchall()
    for doc_id, version, file_name, media_type, text, blocks, page_count in rows:
        parsed = tuple(Block(s, e, k, tuple(h), p) for s, e, k, h, p in json.loads(blocks))
        yield doc_id, version, Document(file_name, media_type, text, parsed, page_count)


def rename_rows(db: sqlite3.Connection, doc_id: str, file_name: str, source: str) -> bool:
    """A document's file name and source changed in place (a file moved at its source, the
    same bytes): its chunks' lexical context (file name and headings) follows, in the FTS5
    index too; vectors and text are unchanged. False when there is no such document."""
    row = db.execute("SELECT file_name FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    if row is None:
        return False
    now = datetime.now(UTC).isoformat(timespec="seconds")
    db.execute(
        "UPDATE documents SET file_name = ?, source = ?, updated_at = ? WHERE doc_id = ?",
        (file_name, source, now, doc_id),
    )
    db.execute(
        "INSERT INTO chunks_fts(chunks_fts, rowid, text, context) "
        "SELECT 'delete', id, text, context FROM chunks WHERE doc_id = ?",
        (doc_id,),
    )
    db.execute(
        "UPDATE chunks SET context = ? || substr(context, ?) WHERE doc_id = ?",
        (file_name, len(row[0]) + 1, doc_id),
    )
    db.execute(
        "INSERT INTO chunks_fts(rowid, text, context) "
        "SELECT id, text, context FROM chunks WHERE doc_id = ?",
        (doc_id,),
    )
    return True
