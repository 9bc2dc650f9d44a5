"""How the vector-store catalog's rows are read (index/store/collections.py): a store's file
counts, a member file as the API shows it, file states, and the SQL they share."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection

from index.access import Reader
from index.errors import InvalidRequestError, PermissionDeniedError
from index.store.collection_types import (
    DAY,
    FILE_STATUSES,
    ExpiresAfter,
    FileCounts,
    FileError,
    FileSpec,
    VectorStoreFileRecord,
    VectorStoreNotFoundError,
    VectorStoreRecord,
    file_not_found,
    store_not_found,
)
from index.store.rows import readable_sql

MAX_FILES_PER_CALL = 2000  # OpenAI's file-batch limit
FileRef = str | FileSpec


# A member is a stored document, or an upload still being ingested or refused (uploads.py).
FILE_JOIN = (
    "LEFT JOIN documents d ON d.doc_id = f.doc_id LEFT JOIN uploads u ON u.doc_id = f.doc_id"
)
SIZE = "COALESCE(d.byte_count, length(u.data), 0)"
NAME = "COALESCE(d.file_name, u.file_name, '')"


def readable_member(reader: Reader) -> tuple[str, list[str]]:
    """A SQL condition on ``FILE_JOIN``'s rows: the member is a document (or, before it is
    one, an upload) that ``reader`` may read. Every read of the catalog's members applies
    it, so that what a reader may not read is absent from pages, counts and cursors alike."""
    document, by_document = readable_sql(reader, "d")
    upload, by_upload = readable_sql(reader, "u")
    sql = (f"(CASE WHEN d.doc_id IS NOT NULL THEN {document}"
           f" WHEN u.doc_id IS NOT NULL THEN {upload} ELSE 0 END)")  # fmt: skip
    return sql, [*by_document, *by_upload]


def file_counts(
    db: sqlite3.Connection, reader: Reader, where: str, value: str
) -> tuple[FileCounts, int]:
    """File counts by status and the members' total bytes, for a store or a batch: of the
    members ``reader`` may read."""
    by_status = {status: 0 for status in FILE_STATUSES}
    usage = 0
    readable, params = readable_member(reader)
    for status, count, size in db.execute(
        f"SELECT f.status, COUNT(*), SUM({SIZE}) FROM vector_store_files f {FILE_JOIN}"
        f" WHERE {where} AND {readable} GROUP BY f.status",
        (value, *params),
    ):
        by_status[status], usage = count, usage + size
    return FileCounts(**by_status, total=sum(by_status.values())), usage


def expiry_time(last_active_at: int, expiry_json: str | None) -> int | None:
    return None if expiry_json is None else last_active_at + json.loads(expiry_json)["days"] * DAY


def dump(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def placeholders(values: Collection) -> str:
    return ",".join("?" * len(values))


def file_states(
    db: sqlite3.Connection, reader: Reader, doc_ids: list[str]
) -> dict[str, tuple[str, str | None]]:
    """(membership status, last_error JSON) of each file that exists and ``reader`` may
    read: a stored document is ``completed`` (while a new version of it is ingested, too:
    the stored one is searched); a first upload still being ingested ``in_progress``; a
    refused one ``failed``, with why."""
    marks = placeholders(doc_ids)
    by_upload, by_upload_params = readable_sql(reader, "u")
    uploads = db.execute(
        f"SELECT u.doc_id, u.status, u.error FROM uploads u WHERE u.doc_id IN ({marks})"
        f" AND u.doc_id NOT IN (SELECT doc_id FROM documents) AND {by_upload}",
        (*doc_ids, *by_upload_params),
    )
    states: dict[str, tuple[str, str | None]] = {
        doc_id: ("in_progress", None) if status == "in_progress"
        else ("failed", json.dumps({"code": "invalid_file", "message": error}))
        for doc_id, status, error in uploads
    }  # fmt: skip
    by_document, by_document_params = readable_sql(reader, "d")
    documents = db.execute(
        f"SELECT d.doc_id FROM documents d WHERE d.doc_id IN ({marks}) AND {by_document}",
        (*doc_ids, *by_document_params),
    )
    for (doc_id,) in documents:
        states[doc_id] = ("completed", None)
    return states


def file_record(
    db: sqlite3.Connection, reader: Reader, store_id: str, doc_id: str
) -> VectorStoreFileRecord:
    """A store's member as the API shows it (404 when it is not one, or when ``reader`` may
    not read it: the same answer)."""
    readable, params = readable_member(reader)
    row = db.execute(
        f"SELECT f.created_at, f.status, {SIZE}, f.attributes, f.chunking_strategy,"
        f" f.last_error, f.batch_id, {NAME} FROM vector_store_files f {FILE_JOIN}"
        f" WHERE f.store_id = ? AND f.doc_id = ? AND {readable}",
        (store_id, doc_id, *params),
    ).fetchone()
    if row is None:
        raise file_not_found(store_id, doc_id)
    created_at, status, size, attrs, strategy, error, batch_id, file_name = row
    return VectorStoreFileRecord(
        doc_id, store_id, created_at, status, size, json.loads(attrs), json.loads(strategy),
        error and FileError(**json.loads(error)), batch_id, file_name,
    )  # fmt: skip


def store_record(
    db: sqlite3.Connection, reader: Reader, store_id: str, now: int
) -> VectorStoreRecord:
    """A store as ``reader`` sees it (counts and size of the members it may read)."""
    row = db.execute(
        "SELECT name, metadata, expires_after, created_at, last_active_at FROM vector_stores"
        " WHERE id = ?",
        (store_id,),
    ).fetchone()
    if row is None:
        raise store_not_found(store_id)
    name, metadata, expiry, created_at, last_active = row
    counts, usage = file_counts(db, reader, "f.store_id = ?", store_id)
    expires_at = expiry_time(last_active, expiry)
    if expires_at is not None and now >= expires_at:
        status = "expired"
    else:
        status = "in_progress" if counts.in_progress else "completed"
    return VectorStoreRecord(
        store_id, name, created_at, last_active, status, counts, usage,
        json.loads(metadata), expiry and ExpiresAfter(json.loads(expiry)["days"]), expires_at,
    )  # fmt: skip


def require_writable(db: sqlite3.Connection, reader: Reader, store_id: str) -> None:
    """The store, when ``reader`` may change it: its owner or an admin (403 else; 404 when
    it does not exist)."""
    row = db.execute("SELECT owner FROM vector_stores WHERE id = ?", (store_id,)).fetchone()
    if row is None:
        raise store_not_found(store_id)
    if not (reader.admin or (row[0] is not None and row[0] == reader.identity)):
        raise PermissionDeniedError(
            f"vector store {store_id!r} belongs to {row[0] or 'the operator'}: only its "
            "owner or an admin may change it; create a vector store of your own"
        )


IDEMPOTENCY_S = 86_400  # how long a create's Idempotency-Key is remembered (OpenAI's: a day)


def created_before(db: sqlite3.Connection, owner: str, key: str | None, now: int) -> str | None:
    """The id of what ``owner``'s create with Idempotency-Key ``key`` made within a day, if
    any: a retried create answers with it instead of making another."""
    if key is None:
        return None
    if len(key) > 255:
        raise InvalidRequestError(
            "Idempotency-Key: at most 255 characters", param="idempotency_key"
        )
    row = db.execute(
        "SELECT object_id FROM idempotent_creates WHERE owner = ? AND key = ? AND created_at > ?",
        (owner, key, now - IDEMPOTENCY_S),
    ).fetchone()
    return row[0] if row else None


def remember_created(
    db: sqlite3.Connection, owner: str, key: str | None, object_id: str, now: int
) -> None:
    if key is None:
        return
    db.execute("DELETE FROM idempotent_creates WHERE created_at <= ?", (now - IDEMPOTENCY_S,))
    db.execute("INSERT OR REPLACE INTO idempotent_creates VALUES (?, ?, ?, ?)",
               (owner, key, object_id, now))  # fmt: skip


def require_batch(db: sqlite3.Connection, store_id: str, batch_id: str) -> tuple:
    """(created_at, status) of a batch of the store, or 404."""
    row = db.execute(
        "SELECT created_at, status FROM vector_store_batches WHERE id = ? AND store_id = ?",
        (batch_id, store_id),
    ).fetchone()
    if row is None:
        raise VectorStoreNotFoundError(
            f"no file batch {batch_id!r} in vector store {store_id!r}", param="batch_id"
        )
    return row
