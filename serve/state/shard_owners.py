"""Each tenant's shard owned by one writer at a time, and its writes kept where any node can
replay them (several nodes, ``state.url``: serve/state/database.py).

A shard lives on its owner's local disk. Who owns it is a lease on the state server: holder,
node, expiry (the server's clock, so nodes' clocks do not matter) and a fencing token that
grows with each new owner. Every write is appended to the tenant's log on the server before
it is applied to the local shard and before the client is answered, and the append is fenced:
it commits only while the writer still holds an unexpired lease with its token. So:

- a writer that lost its lease (expired while it was paused, or taken over) cannot add to the
  log: its append fails and the write is refused, before anything reaches its local copy;
- whoever owns the shard next replays the log entries its local copy has not applied yet:
  every acknowledged write is recovered (recovery point: the last acknowledged write), in
  the time its replay takes (re-ingesting what the new node's copy lacks).

Entries are idempotent to apply (an upload of the same bytes is "unchanged"; a delete of an
absent document does nothing), so a copy that applied an entry but crashed before recording
its position applies it again safely.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from index.access import KEEP, OPERATOR, Reader
from index.durable import write_atomic
from index.errors import DocumentNotFoundError, GroundedError
from index.store.collection_types import UNSET, FileSpec
from index.store.collections import MUTATIONS, VectorStoreCatalog, random_id
from serve.state.database import StateConfig, open_database

log = logging.getLogger("grounded")
NOW = "CAST(extract(epoch from clock_timestamp()) AS DOUBLE PRECISION)"  # the server's clock
MIGRATIONS = (
    """
CREATE TABLE IF NOT EXISTS shard_owners (
    tenant TEXT PRIMARY KEY, holder TEXT NOT NULL, node TEXT NOT NULL, token BIGINT NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS shard_log (
    seq BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, token BIGINT NOT NULL, op TEXT NOT NULL,
    meta TEXT NOT NULL, data BYTEA, at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS shard_log_by_tenant ON shard_log (tenant, seq)
""",
    # Snapshots (serve/state/shard_snapshots.py) and each tenant's log identity: a copy made
    # from another log (the state server replaced) is never continued with this one.
    """
ALTER TABLE shard_owners ADD COLUMN IF NOT EXISTS log_id TEXT NOT NULL
    DEFAULT md5(random()::text || clock_timestamp()::text);
CREATE TABLE IF NOT EXISTS shard_snapshots (
    tenant TEXT PRIMARY KEY, snapshot TEXT NOT NULL, seq BIGINT NOT NULL, parts INT NOT NULL,
    bytes BIGINT NOT NULL, sha256 TEXT NOT NULL, at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS shard_snapshot_parts (
    tenant TEXT NOT NULL, snapshot TEXT NOT NULL, part INT NOT NULL, data BYTEA NOT NULL,
    PRIMARY KEY (tenant, snapshot, part)
)
""",
)
SOURCE_OPS = ("source_declare", "source_remove", "source_batch")  # serve/shards/sources.py
OPS = ("upload", "delete", "set_access", "catalog", *SOURCE_OPS)


class ShardOwnedElsewhereError(GroundedError):
    """Another writer holds the tenant's shard: retry once its lease ends."""

    status = 503
    type = "service_unavailable"
    code = "shard_owned_elsewhere"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:  # Ray re-raises it
        super().__init__(message)
        self.retry_after = retry_after


class LeaseLostError(GroundedError):
    """This writer no longer owns the shard: the write was refused, nothing was applied."""

    status = 503
    type = "service_unavailable"
    code = "shard_lease_lost"


@dataclass(frozen=True, slots=True)
class ShardLease:
    tenant: str
    holder: str
    node: str
    token: int  # grows with each new owner: fences a former owner's writes
    expires: float  # the state server's clock


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    op: str
    meta: dict[str, Any]
    data: bytes | None


class ShardOwners:
    """Leases and write logs of tenant shards, on the state server (PostgreSQL)."""

    def __init__(self, state: StateConfig, lease_s: float = 15.0) -> None:
        if not state.url:
            raise ValueError("shard owners need the state server (state.url)")
        self.state, self.lease_s = state, lease_s
        self.db = open_database(state, Path("."), "shards", MIGRATIONS)
        # Renewals on a connection of their own: a long append (an upload's bytes) never
        # holds them up past a lease.
        self.renewals = open_database(state, Path("."), "shards", MIGRATIONS)

    def close(self) -> None:
        self.db.close()
        self.renewals.close()

    def acquire(self, tenant: str, holder: str, node: str) -> ShardLease:
        """Own ``tenant``'s shard (or renew an own lease); ShardOwnedElsewhereError while
        another holder's lease runs."""
        with self.db.transaction(lock=f"shard:{tenant}") as db:
            row = db.execute(
                f"SELECT holder, node, token, expires, {NOW} FROM shard_owners WHERE tenant = ?",
                (tenant,),
            ).fetchone()
            if row is not None:
                owner, where, token, expires, now = row
                if owner != holder and expires > now:
                    raise ShardOwnedElsewhereError(
                        f"tenant {tenant!r}'s shard is held by {owner} on {where} for another "
                        f"{expires - now:.1f} s; retry then",
                        retry_after=max(1.0, expires - now),
                    )
            token = 1 if row is None else row[2] + (row[0] != holder)
            (expires,) = db.execute(
                "INSERT INTO shard_owners VALUES (?, ?, ?, ?, "
                f"{NOW} + ?) ON CONFLICT (tenant) DO UPDATE SET holder = excluded.holder, "
                "node = excluded.node, token = excluded.token, expires = excluded.expires "
                "RETURNING expires",
                (tenant, holder, node, token, self.lease_s),
            ).fetchone()
        return ShardLease(tenant, holder, node, token, expires)

    def renew(self, lease: ShardLease) -> ShardLease:
        """The lease for another ``lease_s``; LeaseLostError when it ended or changed hands."""
        with self.db.transaction() as db:
            row = db.execute(
                f"UPDATE shard_owners SET expires = {NOW} + ? WHERE tenant = ? AND holder = ? "
                f"AND token = ? AND expires > {NOW} RETURNING expires",
                (self.lease_s, lease.tenant, lease.holder, lease.token),
            ).fetchone()
        if row is None:
            raise self._lost(lease)
        return ShardLease(lease.tenant, lease.holder, lease.node, lease.token, row[0])

    def renew_all(self, leases: list[ShardLease]) -> dict[str, ShardLease]:
        """Every lease of one holder renewed in one statement: the renewed ones by tenant;
        a lease missing from the answer ended or changed hands (LeaseLostError's case)."""
        if not leases:
            return {}
        holder = leases[0].holder
        if any(lease.holder != holder for lease in leases):
            raise ValueError("renew_all renews one holder's leases")
        with self.renewals.transaction() as db:
            rows = db.execute(
                f"UPDATE shard_owners SET expires = {NOW} + ? WHERE holder = ? "
                f"AND expires > {NOW} AND (tenant, token) IN (SELECT * FROM unnest("
                "CAST(? AS TEXT[]), CAST(? AS BIGINT[]))) RETURNING tenant, token, expires",
                (self.lease_s, holder, [lease.tenant for lease in leases],
                 [lease.token for lease in leases]),
            ).fetchall()  # fmt: skip
        by_tenant = {lease.tenant: lease for lease in leases}
        return {tenant: ShardLease(tenant, holder, by_tenant[tenant].node, token, expires)
                for tenant, token, expires in rows}  # fmt: skip

    def release(self, lease: ShardLease) -> None:
        """Give the shard up (its next owner need not wait for the lease to run out). The row
        stays, with its token: the next owner's is still larger."""
        with self.db.transaction() as db:
            db.execute(
                "UPDATE shard_owners SET expires = 0 WHERE tenant = ? AND holder = ? AND token = ?",
                (lease.tenant, lease.holder, lease.token),
            )

    def append(
        self, lease: ShardLease, op: str, meta: dict[str, Any], data: bytes | None = None
    ) -> int:
        """Log one write, fenced: it commits only while ``lease`` holds. Its sequence number;
        LeaseLostError (nothing logged) when the lease ended or changed hands."""
        if op not in OPS:
            raise ValueError(f"unknown shard operation {op!r}; one of {OPS}")
        with self.db.transaction() as db:
            # The owner row share-locked until this commits: a takeover (which updates the
            # row) waits for it, so the new owner's replay sees every append acknowledged
            # under the lease it replaces, and seq order is commit order.
            db.execute(
                "SELECT 1 FROM shard_owners WHERE tenant = ? AND holder = ? AND token = ? "
                "FOR SHARE",
                (lease.tenant, lease.holder, lease.token),
            )
            row = db.execute(
                "INSERT INTO shard_log (tenant, token, op, meta, data, at) SELECT CAST(? AS TEXT), "
                "CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BYTEA), "
                f"{NOW} FROM shard_owners WHERE tenant = ? AND holder = ? AND token = ? "
                f"AND expires > {NOW} RETURNING seq",
                (lease.tenant, lease.token, op, json.dumps(meta), data, lease.tenant,
                 lease.holder, lease.token),
            ).fetchone()  # fmt: skip
        if row is None:
            raise self._lost(lease)
        return row[0]

    def entries(self, tenant: str, after: int = 0, batch: int = 64) -> Iterator[LogEntry]:
        """The tenant's logged writes after sequence number ``after``, in order."""
        while True:
            with self.db.read() as db:
                rows = db.execute(
                    "SELECT seq, op, meta, data FROM shard_log WHERE tenant = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (tenant, after, batch),
                ).fetchall()
            for seq, op, meta, data in rows:
                yield LogEntry(seq, op, json.loads(meta), bytes(data) if data else None)
                after = seq
            if len(rows) < batch:
                return

    @staticmethod
    def _lost(lease: ShardLease) -> LeaseLostError:
        return LeaseLostError(
            f"this replica ({lease.holder}) no longer owns tenant {lease.tenant!r}'s shard "
            "(its lease ran out or another replica took it over); the write was not applied: "
            "retry, and it reaches the current owner"
        )


class Replayed:
    """How far a local shard copy has applied its tenant's log, and which log that is:
    ``<shard dir>/log-position``, "<log id> <seq>" (written after each entry; an entry applied
    twice is harmless). A file from before logs had ids holds the number alone."""

    def __init__(self, shard_dir: Path) -> None:
        self.path = Path(shard_dir) / "log-position"

    def read(self) -> tuple[str | None, int]:
        """(the log's id, or None where not recorded; the last entry applied, 0: none)."""
        try:
            *log_id, seq = self.path.read_text().split()
        except FileNotFoundError:
            return None, 0
        return (log_id[0] if log_id else None), int(seq)

    def get(self) -> int:
        return self.read()[1]

    def set(self, seq: int, log_id: str | None = None) -> None:
        """``log_id``: the log this copy follows from now on (else the one recorded)."""
        log_id = log_id or self.read()[0]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, (f"{log_id} {seq}" if log_id else str(seq)).encode())


def upload_entry(file_name: str, access: Any = KEEP, owner: str | None = None) -> dict[str, Any]:
    return {"file_name": file_name, "access": access, "owner": owner}


def catalog_entry(method: str, reader: Reader, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A vector-store catalog change, with what makes its replay exact: who made it, the
    time it ran at and the ids it gives what it creates."""
    if method not in MUTATIONS:
        raise ValueError(f"{method!r} does not change the catalog; one of {MUTATIONS}")
    who = {"identity": reader.identity, "principals": sorted(reader.principals),
           "admin": reader.admin}  # fmt: skip
    return {"method": method, "args": _encode(list(args)), "kwargs": _encode(kwargs),
            "now": time.time(), "ids": {p: random_id(p) for p in ("vs_", "vsfb_")},
            "reader": who}  # fmt: skip


def reader_of(meta: dict[str, Any]) -> Reader:
    """Who made a logged catalog change (the operator, for entries from before readers were
    logged: they were allowed then)."""
    who = meta.get("reader")
    if who is None:
        return OPERATOR
    return Reader(who["identity"], frozenset(who["principals"]), admin=who["admin"])


def catalog_of(shard, meta: dict[str, Any]) -> tuple[VectorStoreCatalog, tuple, dict]:
    """The catalog as ``meta`` (a catalog_entry) ran it, and the call's arguments."""
    catalog = VectorStoreCatalog(shard, reader_of(meta), clock=lambda: meta["now"],
                                 new_id=meta["ids"].__getitem__)  # fmt: skip
    return catalog, tuple(_decode(meta["args"])), _decode(meta["kwargs"])


def _encode(value: Any) -> Any:
    """Catalog arguments as JSON: FileSpec and UNSET tagged, tuples as lists."""
    if value is UNSET:
        return {"$unset": True}
    if isinstance(value, FileSpec):
        return {"$file": [value.doc_id, _encode(value.attributes),
                          _encode(value.chunking_strategy)]}  # fmt: skip
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if value.keys() == {"$unset"}:
            return UNSET
        if value.keys() == {"$file"}:
            doc_id, attributes, strategy = value["$file"]
            return FileSpec(doc_id, _decode(attributes), _decode(strategy))
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def apply_entry(entry: LogEntry, ingest: Callable, shard) -> None:
    """Apply one logged write to a local shard copy: ``ingest(file_name, data, access,
    owner)`` ingests an upload (the replica's own ingestion: parse, chunk, embed, store), and
    ``ingest.source(op, meta, data)`` a source's write (serve/shards/ingestion.py
    ``Replaying``). A document already gone (the entry applied once before, or deleted by a
    later one) is skipped."""
    meta = entry.meta
    if entry.op in SOURCE_OPS:
        ingest.source(entry.op, meta, entry.data)
        return
    access = meta.get("access")
    access = tuple(access) if isinstance(access, list) else access  # JSON keeps tuples as lists
    if entry.op == "upload":
        ingest(meta["file_name"], entry.data, access, meta.get("owner"))
        return
    if entry.op == "catalog":  # refused (a 4xx) as when it ran, or applied before: skipped
        catalog, args, kwargs = catalog_of(shard, meta)
        with contextlib.suppress(GroundedError, sqlite3.IntegrityError):
            getattr(catalog, meta["method"])(*args, **kwargs)
        return
    with contextlib.suppress(DocumentNotFoundError):
        if entry.op == "delete":
            shard.delete_document(meta["doc_id"])
        elif entry.op == "set_access":
            shard.set_access(meta["doc_id"], access)
        else:
            raise ValueError(f"unknown shard operation {entry.op!r}")


class ReplayStoppedError(GroundedError):
    """An entry of the tenant's log could not be applied now (the embedder unreachable, a
    disk): the replay stopped before it, and the next request tries again from there."""

    status = 503
    type = "service_unavailable"
    retry_after = 5


def replay(owners: ShardOwners, tenant: str, position: Replayed, ingest: Callable, shard) -> int:
    """Bring a local copy up to the tenant's log; the number of entries applied. An entry
    that fails to apply stops it there (ReplayStoppedError): the position stays before it,
    so nothing acknowledged is ever skipped."""
    applied = 0
    for entry in owners.entries(tenant, position.get()):
        try:
            apply_entry(entry, ingest, shard)
        except Exception as exc:
            log.warning("replaying tenant %r stopped at entry %d", tenant, entry.seq,
                        exc_info=True)  # fmt: skip
            raise ReplayStoppedError(
                f"taking tenant {tenant!r} over stopped at its logged {entry.op} #{entry.seq} "
                f"({type(exc).__name__}: {exc}); nothing after it was skipped: retry shortly"
            ) from exc
        position.set(entry.seq)
        applied += 1
    return applied
