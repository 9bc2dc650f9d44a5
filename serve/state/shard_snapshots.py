"""Per-tenant snapshots of shard copies on the state server, so that taking a tenant over
costs its snapshot plus the log after it, never its whole history.

A snapshot is a consistent copy of a tenant's shard database: everything the shard holds
(documents, chunks with their vectors, uploads and their bytes, vector stores; the FAISS index
is derived, rebuilt from the vectors), tagged with the last log entry it holds. The owner
takes one once its log has grown by ``state.snapshot_every`` entries or ``state.snapshot_mb``
of uploaded bytes since the last (serve/shards/snapshots.py). Storing it is fenced by the
lease as an append is, and deletes the log up to its position and the snapshot before it in
the same transaction: the log holds only what came after the last snapshot.

Why PostgreSQL (BYTEA parts) rather than object storage: it already is every node's shared
state, so the snapshot and the log's truncation commit together (no log cut below a snapshot
that did not land), the server's backups (docs/deployment.md) hold both, and no new service
or credential is needed. The price: the server keeps each tenant's latest shard once.

A node's copy is adopted as it is when it follows the tenant's log (the same log id) at a
position the log continues (at or past the snapshot, not past the log's end). Any other copy
(made from another log, behind the snapshot, or ahead of a log restored from a backup) is
replaced by the snapshot, or emptied where there is none, before the log's tail is replayed.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from index.store.rows import DB_NAME
from index.store.shard import TenantShard
from serve.state.database import open_database
from serve.state.shard_owners import (
    MIGRATIONS,
    NOW,
    Replayed,
    ReplayStoppedError,
    ShardLease,
    ShardOwners,
    replay,
)

log = logging.getLogger("grounded")
PART = 8 << 20  # bytes per row: each written in a transaction of its own


@dataclass(frozen=True, slots=True)
class SnapshotHead:
    snapshot: str  # the id its parts carry
    seq: int  # the last log entry it holds
    parts: int
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class LogState:
    log_id: str | None  # None: the tenant was never owned
    snapshot: SnapshotHead | None
    last: int  # the last entry the log or its snapshot holds (0: none)
    entries: int  # in the log after the snapshot
    bytes: int  # their uploaded bytes


class ShardSnapshots:
    """The snapshots and log states of tenant shards, in ShardOwners' schema, on a connection
    of their own (a snapshot's parts never hold up the owner's appends)."""

    def __init__(self, owners: ShardOwners) -> None:
        self.owners = owners
        self.db = open_database(owners.state, Path("."), "shards", MIGRATIONS)

    def close(self) -> None:
        self.db.close()

    def state(self, tenant: str) -> LogState:
        with self.db.read() as db:
            owned = db.execute(
                "SELECT log_id FROM shard_owners WHERE tenant = ?", (tenant,)
            ).fetchone()
            head = db.execute(
                "SELECT snapshot, seq, parts, bytes, sha256 FROM shard_snapshots WHERE tenant = ?",
                (tenant,),
            ).fetchone()
            last, entries, size = db.execute(
                "SELECT coalesce(max(seq), 0), count(*), "
                "CAST(coalesce(sum(octet_length(data)), 0) AS BIGINT) "
                "FROM shard_log WHERE tenant = ?",
                (tenant,),
            ).fetchone()
        head = SnapshotHead(*head) if head else None
        return LogState(owned[0] if owned else None, head, max(last, head.seq if head else 0),
                        entries, size)  # fmt: skip

    def put(self, lease: ShardLease, seq: int, copy: Path) -> SnapshotHead | None:
        """Store ``copy`` (a shard database holding the log up to ``seq``) as the tenant's
        snapshot; None when one at or past ``seq`` is stored already. Its parts go first,
        each in a short transaction (a lease's renewal never waits behind them); then,
        fenced by the lease, the snapshot is named the tenant's, and the log up to ``seq``,
        the snapshot before and any parts left by a store that failed are deleted."""
        tenant, name, digest, parts = lease.tenant, uuid.uuid4().hex, hashlib.sha256(), 0
        with copy.open("rb") as file:
            while data := file.read(PART):
                with self.db.transaction() as db:
                    db.execute("INSERT INTO shard_snapshot_parts VALUES (?, ?, ?, ?)",
                               (tenant, name, parts, data))  # fmt: skip
                digest.update(data)
                parts += 1
        head = SnapshotHead(name, seq, parts, copy.stat().st_size, digest.hexdigest())
        with self.db.transaction() as db:
            held = db.execute(
                "SELECT 1 FROM shard_owners WHERE tenant = ? AND holder = ? AND token = ? "
                f"AND expires > {NOW} FOR SHARE",
                (tenant, lease.holder, lease.token),
            ).fetchone()
            if held is None:
                raise ShardOwners._lost(lease)
            stored = db.execute(
                "SELECT seq FROM shard_snapshots WHERE tenant = ? FOR UPDATE", (tenant,)
            ).fetchone()
            if stored is not None and stored[0] >= seq:
                db.execute("DELETE FROM shard_snapshot_parts WHERE tenant = ? AND snapshot = ?",
                           (tenant, name))  # fmt: skip
                return None
            db.execute(
                f"INSERT INTO shard_snapshots VALUES (?, ?, ?, ?, ?, ?, {NOW}) ON CONFLICT "
                "(tenant) DO UPDATE SET snapshot = excluded.snapshot, seq = excluded.seq, "
                "parts = excluded.parts, bytes = excluded.bytes, sha256 = excluded.sha256, "
                "at = excluded.at",
                (tenant, name, seq, parts, head.bytes, head.sha256),
            )
            db.execute("DELETE FROM shard_snapshot_parts WHERE tenant = ? AND snapshot <> ?",
                       (tenant, name))  # fmt: skip
            db.execute("DELETE FROM shard_log WHERE tenant = ? AND seq <= ?", (tenant, seq))
        return head

    def fetch(self, tenant: str, head: SnapshotHead, into: Path) -> None:
        """The snapshot's bytes written to ``into``, checked against its digest."""
        digest = hashlib.sha256()
        with into.open("wb") as file:
            for part in range(head.parts):
                with self.db.read() as db:
                    row = db.execute(
                        "SELECT data FROM shard_snapshot_parts WHERE tenant = ? AND snapshot = ? "
                        "AND part = ?",
                        (tenant, head.snapshot, part),
                    ).fetchone()
                if row is None:
                    raise ValueError(f"tenant {tenant!r}'s snapshot lost its part {part}")
                digest.update(bytes(row[0]))
                file.write(bytes(row[0]))
        if digest.hexdigest() != head.sha256:
            raise ValueError(f"tenant {tenant!r}'s snapshot does not match its digest")


def catch_up(
    snapshots: ShardSnapshots, tenant: str, shard: TenantShard, ingest: Callable, scratch: Path
) -> tuple[int, LogState, bool]:
    """Bring a node's copy up to the tenant's log: adopted as it is when it follows the log,
    else replaced by the snapshot (fetched into ``scratch``, a folder) or emptied; then the
    log's tail replayed (serve/state/shard_owners.py ``replay``). (entries applied, the log's
    state before, whether the copy was replaced)."""
    state, position = snapshots.state(tenant), Replayed(shard.directory)
    mine, at = position.read()
    head = state.snapshot
    base = head.seq if head else 0
    if mine in (None, state.log_id) and base <= at <= state.last:
        if mine is None:
            position.set(at, state.log_id)
        return replay(snapshots.owners, tenant, position, ingest, shard), state, False
    log.info("tenant %r: this node's copy (log %s, entry %d) does not follow the log (%s, "
             "snapshot at %d, last %d): replaced", tenant, mine, at, state.log_id, base,
             state.last)  # fmt: skip
    scratch.mkdir(parents=True, exist_ok=True)
    copy = scratch / DB_NAME
    if head is None:  # an empty shard
        TenantShard(scratch, tenant, shard.manifest, shard.vector_config).start().close()
    else:
        try:
            snapshots.fetch(tenant, head, copy)
        except (ValueError, OSError) as exc:
            raise ReplayStoppedError(
                f"taking tenant {tenant!r} over: its snapshot could not be read ({exc}); "
                "retry shortly"
            ) from exc
    shard.replace_with(copy)
    position.set(base, state.log_id)
    return replay(snapshots.owners, tenant, position, ingest, shard), state, True
