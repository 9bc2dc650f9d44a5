"""Files uploaded through the API: kept from the moment they are received, so that their
ingestion can outlast the HTTP request and survive a restart.

An upload is ``in_progress`` until the pipeline has written its document (its bytes then move
to ``originals``: what ``GET /v1/files/{id}/content`` returns) or refused it (``error``, kept
with the reason until the file is deleted or uploaded again). A new version of a stored file
leaves the stored one searchable until it replaces it. Vector-store memberships of a first
upload follow it: ``in_progress``, then ``completed``, or ``failed`` with ``last_error``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

from index.access import KEEP, Access
from index.errors import DocumentNotFoundError
from index.store.shard import TenantShard

_COLUMNS = "doc_id, file_name, length(data), status, error, created_at, access, owner"
_NEW = "NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = vector_store_files.doc_id)"


@dataclass(frozen=True, slots=True)
class UploadRecord:
    doc_id: str
    file_name: str
    byte_count: int
    status: Literal["in_progress", "error"]
    error: str | None
    created_at: int
    # Who will read it (index/access.py): None, the tenant (also when the upload keeps a
    # stored document's list: that document is what is read until the upload replaces it).
    access: tuple[str, ...] | None = None
    owner: str | None = None  # who uploaded it (index/access.py)


class Uploads:
    def __init__(self, shard: TenantShard, *, clock=time.time) -> None:
        self.shard, self._clock = shard, clock

    def store(
        self,
        doc_id: str,
        file_name: str,
        data: bytes,
        access: Access | str = KEEP,
        owner: str | None = None,
    ) -> UploadRecord:
        """Keep the bytes, ``in_progress``; an earlier attempt at the same file is replaced.
        ``access``: who will read the document (index/access.py), or KEEP (a new document is
        the tenant's, a stored one keeps its list); written with it, never after. ``owner``:
        who uploads it."""
        stored = None if access == KEEP else json.dumps(access)
        with self.shard.transaction(write=True) as db:
            db.execute(
                "INSERT INTO uploads(doc_id, file_name, data, status, error, created_at, access,"
                " owner) VALUES (?, ?, ?, 'in_progress', NULL, ?, ?, ?) ON CONFLICT(doc_id) DO"
                " UPDATE SET file_name = excluded.file_name, data = excluded.data,"
                " status = 'in_progress', error = NULL, created_at = excluded.created_at,"
                " access = excluded.access, owner = excluded.owner",
                (doc_id, file_name, data, int(self._clock()), stored, owner),
            )
            db.execute(
                "UPDATE vector_store_files SET status = 'in_progress', last_error = NULL"
                f" WHERE doc_id = ? AND {_NEW}",
                (doc_id,),
            )
        return self.get(doc_id)

    def finish(self, doc_id: str, error: str | None = None, data: bytes | None = None) -> None:
        """The ingestion ended: the document is written (its bytes become its original), or
        it was refused or failed with ``error`` (kept, with the bytes, until deleted). With
        ``data`` (the bytes that were ingested), an upload of the same file stored meanwhile
        is left pending for its own ingestion."""
        same, args = ("", ()) if data is None else (" AND data = ?", (data,))
        with self.shard.transaction(write=True) as db:
            if error is None:
                db.execute(
                    "INSERT OR REPLACE INTO originals(doc_id, file_name, data)"
                    f" SELECT doc_id, file_name, data FROM uploads WHERE doc_id = ?{same}",
                    (doc_id, *args),
                )
                db.execute(f"DELETE FROM uploads WHERE doc_id = ?{same}", (doc_id, *args))
                member, last_error = "completed", None
            else:
                db.execute(
                    f"UPDATE uploads SET status = 'error', error = ? WHERE doc_id = ?{same}",
                    (error, doc_id, *args),
                )
                member = "failed"
                last_error = json.dumps({"code": "invalid_file", "message": error})
            db.execute(
                "UPDATE vector_store_files SET status = ?, last_error = ?"
                " WHERE doc_id = ? AND status = 'in_progress'",
                (member, last_error, doc_id),
            )

    def forget(self, doc_id: str) -> None:
        """A refusal answered to the client at once: nothing of that upload is kept (a stored
        earlier version of the file stays as it was)."""
        with self.shard.transaction(write=True) as db:
            db.execute("DELETE FROM uploads WHERE doc_id = ?", (doc_id,))
            db.execute(f"DELETE FROM vector_store_files WHERE doc_id = ? AND {_NEW}", (doc_id,))

    def get(self, doc_id: str) -> UploadRecord:
        with self.shard.transaction() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM uploads WHERE doc_id = ?", (doc_id,))
            found = row.fetchone()
        if found is None:
            raise DocumentNotFoundError(f"no file {doc_id!r} in this tenant", param="file_id")
        return _record(found)

    def access(self, doc_id: str) -> Access | str:
        """Who the upload's document is for, as given to ``store`` (KEEP when not given)."""
        with self.shard.transaction() as db:
            row = db.execute("SELECT access FROM uploads WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None or row[0] is None:
            return KEEP
        given = json.loads(row[0])
        return None if given is None else tuple(given)

    def pending(self, doc_id: str) -> bool:
        """Whether the upload is still being ingested (not deleted, not finished)."""
        with self.shard.transaction() as db:
            row = db.execute(
                "SELECT 1 FROM uploads WHERE doc_id = ? AND status = 'in_progress'", (doc_id,)
            )
            return row.fetchone() is not None

    def unfinished(self) -> list[UploadRecord]:
        """Uploads being ingested, and refused ones (listed with the files, so that the reason
        stays visible), oldest first."""
        with self.shard.transaction() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM uploads ORDER BY rowid").fetchall()
        return [_record(row) for row in rows]

    def bytes_of(self, doc_id: str, *, pending: bool = False) -> tuple[str, bytes] | None:
        """(file name, bytes): of the stored document as uploaded (None for a document
        ingested from a path), or with ``pending`` of the upload being ingested."""
        table = "uploads" if pending else "originals"
        with self.shard.transaction() as db:
            row = db.execute(
                f"SELECT file_name, data FROM {table} WHERE doc_id = ?", (doc_id,)
            ).fetchone()
        return (row[0], bytes(row[1])) if row else None


def _record(row: tuple) -> UploadRecord:
    *fields, access, owner = row
    given = None if access is None else json.loads(access)
    return UploadRecord(*fields, access=None if given is None else tuple(given), owner=owner)
