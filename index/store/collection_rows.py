"""How the vector-store catalog's rows are read (index/store/collections.py): a store's file
counts, a member file as the API shows it, file states, and the SQL they share."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection

from index.store.collection_types import (
    DAY,
    FILE_STATUSES,
    FileCounts,
    FileError,
    FileSpec,
    VectorStoreFileRecord,
    file_not_found,
)

MAX_FILES_PER_CALL = 2000  # OpenAI's file-batch limit
FileRef = str | FileSpec


# A member is a stored document, or an upload still being ingested or refused (uploads.py).
FILE_JOIN = (
    "LEFT JOIN documents d ON d.doc_id = f.doc_id LEFT JOIN uploads u ON u.doc_id = f.doc_id"
)
SIZE = "COALESCE(d.byte_count, length(u.data), 0)"
NAME = "COALESCE(d.file_name, u.file_name, '')"


def file_counts(db: sqlite3.Connection, where: str, value: str) -> tuple[FileCounts, int]:
    """File counts by status and the members' total bytes, for a store or a batch."""
    by_status = {status: 0 for status in FILE_STATUSES}
    usage = 0
    for status, count, size in db.execute(
        f"SELECT f.status, COUNT(*), SUM({SIZE}) FROM vector_store_files f {FILE_JOIN}"
        f" WHERE {where} GROUP BY f.status",
        (value,),
    ):
        by_status[status], usage = count, usage + size
    return FileCounts(**by_status, total=sum(by_status.values())), usage


def expiry_time(last_active_at: int, expiry_json: str | None) -> int | None:
    return None if expiry_json is None else last_active_at + json.loads(expiry_json)["days"] * DAY


def dump(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def placeholders(values: Collection) -> str:
    return ",".join("?" * len(values))


def file_states(db: sqlite3.Connection, doc_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """(membership status, last_error JSON) of each existing file: a stored document is
    ``completed`` (while a new version of it is ingested, too: the stored one is searched);
    a first upload still being ingested ``in_progress``; a refused one ``failed``, with why."""
    marks = placeholders(doc_ids)
    uploads = db.execute(
        f"SELECT doc_id, status, error FROM uploads WHERE doc_id IN ({marks})", doc_ids
    )
    states: dict[str, tuple[str, str | None]] = {
        doc_id: ("in_progress", None) if status == "in_progress"
        else ("failed", json.dumps({"code": "invalid_file", "message": error}))
        for doc_id, status, error in uploads
    }  # fmt: skip
    for (doc_id,) in db.execute(f"SELECT doc_id FROM documents WHERE doc_id IN ({marks})", doc_ids):
        states[doc_id] = ("completed", None)
    return states


def file_record(db: sqlite3.Connection, store_id: str, doc_id: str) -> VectorStoreFileRecord:
    """A store's member as the API shows it (404 when it is not one)."""
    row = db.execute(
        f"SELECT f.created_at, f.status, {SIZE}, f.attributes, f.chunking_strategy,"
        f" f.last_error, f.batch_id, {NAME} FROM vector_store_files f {FILE_JOIN}"
        " WHERE f.store_id = ? AND f.doc_id = ?",
        (store_id, doc_id),
    ).fetchone()
    if row is None:
        raise file_not_found(store_id, doc_id)
    created_at, status, size, attrs, strategy, error, batch_id, file_name = row
    return VectorStoreFileRecord(
        doc_id, store_id, created_at, status, size, json.loads(attrs), json.loads(strategy),
        error and FileError(**json.loads(error)), batch_id, file_name,
    )  # fmt: skip
