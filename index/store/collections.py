"""VectorStoreCatalog: OpenAI vector stores as named collections inside one tenant's shard.

A file uploaded through ``/v1/files`` is ingested (chunked and embedded) once, as a ``documents``
row of the tenant's shard whose id is the file id. A vector store is only a named set of those
documents, each membership with its own ``attributes`` (what search ``filters`` test) and the
``chunking_strategy`` it was attached with: joining several stores costs no re-embedding, and
since the document is already embedded a membership is ``completed`` as soon as it exists.

The tables live in the shard's own SQLite database (``schema.py``): isolation between
tenants stays structural (another tenant's ids do not exist here, the same 404 as an id that
never existed), backups of the shard include them, and foreign keys tie them to the documents:
deleting a document removes its memberships, deleting a store leaves its documents in place.

``last_active_at`` moves on every write to a store and on ``touch`` (call it when a search uses
the store); a store whose ``expires_after`` ({"anchor": "last_active_at", "days": N}) has run
out reads as ``expired`` and refuses new files and searches until it is modified again.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from index.access import Reader
from index.errors import DocumentNotFoundError, InvalidRequestError
from index.store.collection_rows import (
    FILE_JOIN,
    created_before,
    dump,
    expiry_time,
    file_counts,
    file_record,
    file_states,
    placeholders,
    readable_member,
    remember_created,
    require_batch,
    require_writable,
    store_record,
)
from index.store.collection_types import (
    FILE_STATUSES,
    UNSET,
    FileBatchRecord,
    FileSpec,
    Unset,
    VectorStoreFileRecord,
    VectorStoreRecord,
    file_not_found,
    store_not_found,
    validate_attributes,
    validate_chunking_strategy,
    validate_expiry,
    validate_metadata,
    validate_name,
)
from index.store.filters import parse_filter
from index.store.paging import Page, cursor_rowid, page_window, validate_page
from index.store.shard import TenantShard

MAX_FILES_PER_CALL = 2000  # OpenAI's file-batch limit
FileRef = str | FileSpec
# The operations that change the catalog (``touch`` only moves an activity time).
MUTATIONS = ("create_store", "update_store", "delete_store", "attach", "create_batch",
             "update_store_file_attributes", "detach")  # fmt: skip


def random_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class VectorStoreCatalog:
    """The vector stores of one started ``TenantShard``, as ``reader`` sees them. Plain
    synchronous methods, safe to call from threads (each is one transaction under the shard's
    lock); results are frozen, picklable dataclasses. The clock is injected for expiry tests.

    A store is listed to the whole tenant (as OpenAI's are to a project); it is changed
    (renamed, deleted, files attached or detached) by its owner, the identity that created
    it, or an admin. Its members that ``reader`` may not read (index/access.py) are absent
    from every answer: pages, cursors, counts and sizes, searches, and the 404 of a file
    that is not a member; they can be neither attached nor detached by it."""

    def __init__(
        self,
        shard: TenantShard,
        reader: Reader,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[str], str] | None = None,
    ) -> None:
        """``new_id(prefix)``: the id of a new store ("vs_") or batch ("vsfb_"); random by
        default (given, with the clock, to replay a logged operation exactly)."""
        self.shard = shard
        self.reader = reader
        self._clock = clock
        self._new_id = new_id or random_id

    # -- stores ----------------------------------------------------------------------------------

    def create_store(
        self,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        expires_after: Mapping | None = None,
        file_ids: Sequence[FileRef] = (),
        attributes: Mapping[str, str | float | bool] | None = None,
        chunking_strategy: Mapping | None = None,
        request_key: str | None = None,
    ) -> VectorStoreRecord:
        """A new store, with ``file_ids`` attached in the same transaction (all or nothing);
        ``request_key`` (a client's Idempotency-Key): a retry returns the first one's store."""
        name, meta = validate_name(name or ""), validate_metadata(metadata)
        expiry, now = validate_expiry(expires_after), self._now()
        with self._write() as db:
            if made := created_before(db, self.reader.identity, request_key, now):
                return self._store(db, made)
            store_id = self._new_id("vs_")
            remember_created(db, self.reader.identity, request_key, store_id, now)
            db.execute(
                "INSERT INTO vector_stores(id, name, metadata, expires_after, created_at,"
                " last_active_at, owner) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (store_id, name, dump(meta), expiry and dump(expiry), now, now,
                 self.reader.identity),
            )  # fmt: skip
            self._attach(db, store_id, file_ids, attributes, chunking_strategy, None, now)
            return self._store(db, store_id)

    def get_store(self, store_id: str) -> VectorStoreRecord:
        with self._read() as db:
            return self._store(db, store_id)

    def list_stores(
        self,
        limit: int = 20,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
    ) -> Page[VectorStoreRecord]:
        """OpenAI's cursor pagination in creation order (``after``/``before`` are store ids)."""
        validate_page(limit, order)
        with self._read() as db:

            def rowid(param: str, store_id: str | None) -> int | None:
                sql = "SELECT rowid FROM vector_stores WHERE id = ?"
                return cursor_rowid(db, sql, (store_id,), param, store_id)

            where, params, scan, backwards = page_window(
                "rowid", order, rowid("after", after), rowid("before", before)
            )
            ids = [
                row[0]
                for row in db.execute(
                    f"SELECT id FROM vector_stores WHERE {where} ORDER BY rowid {scan} LIMIT ?",
                    (*params, limit + 1),
                )
            ]
            return Page.of([self._store(db, i) for i in ids], limit, backwards)

    def update_store(
        self,
        store_id: str,
        *,
        name: str | Unset | None = UNSET,
        metadata: Mapping[str, str] | Unset | None = UNSET,
        expires_after: Mapping | Unset | None = UNSET,
    ) -> VectorStoreRecord:
        """Change what is given: ``metadata=None`` clears it, ``expires_after=None`` removes the
        policy, ``name=None`` leaves the name. A modification counts as activity."""
        changes: dict[str, object] = {"last_active_at": self._now()}
        if name is not None and name is not UNSET:
            changes["name"] = validate_name(name)
        if metadata is not UNSET:
            changes["metadata"] = dump(validate_metadata(metadata))
        if expires_after is not UNSET:
            expiry = validate_expiry(expires_after)
            changes["expires_after"] = expiry and dump(expiry)
        with self._write() as db:
            require_writable(db, self.reader, store_id)
            assignments = ", ".join(f"{column} = ?" for column in changes)
            db.execute(
                f"UPDATE vector_stores SET {assignments} WHERE id = ?",
                (*changes.values(), store_id),
            )
            return self._store(db, store_id)

    def delete_store(self, store_id: str) -> None:
        """Delete the store and its memberships; the documents stay in the tenant."""
        with self._write() as db:
            require_writable(db, self.reader, store_id)
            db.execute("DELETE FROM vector_stores WHERE id = ?", (store_id,))

    def touch(self, store_ids: Collection[str]) -> None:
        """Mark stores as used now (a search): moves ``last_active_at``, which expiry counts
        from. Unknown ids are ignored (the search has already refused them)."""
        ids, now = list(dict.fromkeys(store_ids)), self._now()
        if not ids:
            return
        with self._write() as db:
            db.execute(
                f"UPDATE vector_stores SET last_active_at = ? WHERE id IN ({placeholders(ids)})"
                " AND last_active_at < ?",
                (now, *ids, now),
            )

    # -- files -----------------------------------------------------------------------------------

    def attach(
        self,
        store_id: str,
        doc_ids: Sequence[FileRef],
        attributes: Mapping[str, str | float | bool] | None = None,
        chunking_strategy: Mapping | None = None,
        batch_id: str | None = None,
    ) -> list[VectorStoreFileRecord]:
        """Attach uploaded files (by id, or ``FileSpec`` with their own attributes): all or
        nothing. A file already attached gets the new attributes and strategy."""
        now = self._now()
        with self._write() as db:
            self._require_usable(db, store_id, now)
            require_writable(db, self.reader, store_id)
            if batch_id is not None:
                require_batch(db, store_id, batch_id)
            ids = self._attach(db, store_id, doc_ids, attributes, chunking_strategy, batch_id, now)
            db.execute("UPDATE vector_stores SET last_active_at = ? WHERE id = ?", (now, store_id))
            return [file_record(db, self.reader, store_id, doc_id) for doc_id in ids]

    def create_batch(
        self,
        store_id: str,
        doc_ids: Sequence[FileRef],
        attributes: Mapping[str, str | float | bool] | None = None,
        chunking_strategy: Mapping | None = None,
        request_key: str | None = None,
    ) -> FileBatchRecord:
        """A file batch: its files attached in one transaction (all or nothing);
        ``request_key`` as for ``create_store``."""
        now = self._now()
        with self._write() as db:
            self._require_usable(db, store_id, now)
            require_writable(db, self.reader, store_id)
            if made := created_before(db, self.reader.identity, request_key, now):
                return self._batch(db, store_id, made)
            batch_id = self._new_id("vsfb_")
            remember_created(db, self.reader.identity, request_key, batch_id, now)
            db.execute(
                "INSERT INTO vector_store_batches(id, store_id, created_at, status)"
                " VALUES (?, ?, ?, 'completed')",
                (batch_id, store_id, now),
            )
            self._attach(db, store_id, doc_ids, attributes, chunking_strategy, batch_id, now)
            db.execute("UPDATE vector_stores SET last_active_at = ? WHERE id = ?", (now, store_id))
            return self._batch(db, store_id, batch_id)

    def get_batch(self, store_id: str, batch_id: str) -> FileBatchRecord:
        with self._read() as db:
            return self._batch(db, store_id, batch_id)

    def list_store_files(
        self,
        store_id: str,
        limit: int = 20,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
        status: str | None = None,
        batch_id: str | None = None,
    ) -> Page[VectorStoreFileRecord]:
        """A store's files (or a batch's) in attachment order; cursors are file ids."""
        validate_page(limit, order)
        if status is not None and status not in FILE_STATUSES:
            raise InvalidRequestError(
                f"filter must be one of {', '.join(FILE_STATUSES)}, not {status!r}", param="filter"
            )
        with self._read() as db:
            self._require_store(db, store_id)
            if batch_id is not None:
                require_batch(db, store_id, batch_id)

            readable, readable_params = readable_member(self.reader)
            members = f"FROM vector_store_files f {FILE_JOIN} WHERE f.store_id = ? AND {readable}"

            def rowid(param: str, doc_id: str | None) -> int | None:
                sql = f"SELECT f.rowid {members} AND f.doc_id = ?"
                return cursor_rowid(db, sql, (store_id, *readable_params, doc_id), param, doc_id)

            where, params, scan, backwards = page_window(
                "f.rowid", order, rowid("after", after), rowid("before", before)
            )
            sql = f"SELECT f.doc_id {members} AND {where}"
            params = [store_id, *readable_params, *params]
            for column, value in (("status", status), ("batch_id", batch_id)):
                if value is not None:
                    sql += f" AND f.{column} = ?"
                    params.append(value)
            rows = db.execute(f"{sql} ORDER BY f.rowid {scan} LIMIT ?", (*params, limit + 1))
            files = [file_record(db, self.reader, store_id, row[0]) for row in rows.fetchall()]
            return Page.of(files, limit, backwards)

    def get_store_file(self, store_id: str, doc_id: str) -> VectorStoreFileRecord:
        with self._read() as db:
            self._require_store(db, store_id)
            return file_record(db, self.reader, store_id, doc_id)

    def update_store_file_attributes(
        self, store_id: str, doc_id: str, attributes: Mapping[str, str | float | bool] | None
    ) -> VectorStoreFileRecord:
        """Replace a membership's attributes (``None`` clears them)."""
        checked, now = validate_attributes(attributes), self._now()
        with self._write() as db:
            require_writable(db, self.reader, store_id)
            file_record(db, self.reader, store_id, doc_id)
            db.execute(
                "UPDATE vector_store_files SET attributes = ? WHERE store_id = ? AND doc_id = ?",
                (dump(checked), store_id, doc_id),
            )
            db.execute("UPDATE vector_stores SET last_active_at = ? WHERE id = ?", (now, store_id))
            return file_record(db, self.reader, store_id, doc_id)

    def detach(self, store_id: str, doc_id: str) -> None:
        """Remove a file from the store; the document stays in the tenant (and other stores)."""
        now = self._now()
        with self._write() as db:
            require_writable(db, self.reader, store_id)
            file_record(db, self.reader, store_id, doc_id)  # a member it may read, or 404
            deleted = db.execute(
                "DELETE FROM vector_store_files WHERE store_id = ? AND doc_id = ?",
                (store_id, doc_id),
            )
            if deleted.rowcount == 0:
                raise file_not_found(store_id, doc_id)
            db.execute("UPDATE vector_stores SET last_active_at = ? WHERE id = ?", (now, store_id))

    # -- search ----------------------------------------------------------------------------------

    def matching_doc_ids(self, store_ids: Sequence[str], filters: object = None) -> list[str]:
        """Sorted ids of the documents that are ``completed`` members of any of ``store_ids``
        and whose attributes there satisfy ``filters`` (OpenAI's comparison or compound
        filter; see ``index/store/filters.py`` for the semantics). Every store must exist and
        not be expired. A document in two stores matches if either membership does."""
        return sorted(self.matching_members(store_ids, filters))

    def matching_members(
        self, store_ids: Sequence[str], filters: object = None
    ) -> dict[str, dict[str, Any]]:
        """``matching_doc_ids`` with each document's attributes (of the first listed store
        whose membership matches): what a search result reports."""
        if not store_ids:
            raise InvalidRequestError(
                "give at least one vector store id to search", param="vector_store_ids"
            )
        parsed = parse_filter(filters) if filters is not None else None
        ids, now = list(dict.fromkeys(store_ids)), self._now()
        with self._read() as db:
            for store_id in ids:
                self._require_usable(db, store_id, now)
            readable, params = readable_member(self.reader)
            rows = db.execute(
                f"SELECT f.doc_id, f.attributes, f.store_id FROM vector_store_files f {FILE_JOIN}"
                f" WHERE f.store_id IN ({placeholders(ids)}) AND f.status = 'completed'"
                f" AND {readable}",
                (*ids, *params),
            ).fetchall()
        members: dict[str, dict[str, Any]] = {}
        for doc_id, attrs, _ in sorted(rows, key=lambda row: ids.index(row[2])):
            attributes = json.loads(attrs)
            if doc_id not in members and (parsed is None or parsed.matches(attributes)):
                members[doc_id] = attributes
        return members

    # -- internals -------------------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._clock())

    def _read(self):
        return self.shard.transaction()

    def _write(self):
        return self.shard.transaction(write=True)

    def _attach(self, db, store_id, refs, attributes, strategy, batch_id, now) -> list[str]:
        refs = [refs] if isinstance(refs, str) else list(refs)
        if len(refs) > MAX_FILES_PER_CALL:
            raise InvalidRequestError(
                f"{len(refs)} files in one request; at most {MAX_FILES_PER_CALL}: split them "
                "into several batches",
                param="file_ids",
            )
        specs = [ref if isinstance(ref, FileSpec) else FileSpec(ref, attributes, strategy)
                 for ref in refs]  # fmt: skip
        rows = {
            spec.doc_id: (
                dump(validate_attributes(spec.attributes)),
                dump(validate_chunking_strategy(spec.chunking_strategy)),
            )
            for spec in specs
        }
        known = file_states(db, self.reader, list(rows))
        if missing := [doc_id for doc_id in rows if doc_id not in known]:
            shown = ", ".join(repr(m) for m in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise DocumentNotFoundError(
                f"no file {shown} in this tenant: upload it with POST /v1/files first "
                "(GET /v1/files lists the ids); nothing was attached",
                param="file_id",
            )
        db.executemany(
            "INSERT INTO vector_store_files(store_id, doc_id, attributes, chunking_strategy,"
            " status, last_error, batch_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(store_id, doc_id) DO UPDATE SET attributes = excluded.attributes,"
            " chunking_strategy = excluded.chunking_strategy, status = excluded.status,"
            " last_error = excluded.last_error,"
            " batch_id = COALESCE(excluded.batch_id, batch_id)",
            [(store_id, doc_id, a, c, *known[doc_id], batch_id, now)
             for doc_id, (a, c) in rows.items()],
        )  # fmt: skip
        return list(rows)

    def _require_store(self, db: sqlite3.Connection, store_id: str) -> tuple[int, str | None]:
        row = db.execute(
            "SELECT last_active_at, expires_after FROM vector_stores WHERE id = ?", (store_id,)
        ).fetchone()
        if row is None:
            raise store_not_found(store_id)
        return row

    def _require_usable(self, db: sqlite3.Connection, store_id: str, now: int) -> None:
        last_active, expiry = self._require_store(db, store_id)
        expires_at = expiry_time(last_active, expiry)
        if expires_at is not None and now >= expires_at:
            raise InvalidRequestError(
                f"vector store {store_id!r} expired at {expires_at} (Unix time), "
                f"{json.loads(expiry)['days']} days after its last activity: modify it (a "
                "longer expires_after) to use it again, or create a new store",
                param="vector_store_id",
            )

    def _store(self, db: sqlite3.Connection, store_id: str) -> VectorStoreRecord:
        return store_record(db, self.reader, store_id, self._now())

    def _batch(self, db: sqlite3.Connection, store_id: str, batch_id: str) -> FileBatchRecord:
        self._require_store(db, store_id)
        created_at, status = require_batch(db, store_id, batch_id)
        counts, _ = file_counts(db, self.reader, "f.batch_id = ?", batch_id)
        if status == "completed" and counts.in_progress:  # its files are still being ingested
            status = "in_progress"
        return FileBatchRecord(batch_id, store_id, created_at, status, counts)
