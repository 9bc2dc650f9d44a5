"""Snapshots of the tenants a ShardHost owns (several nodes): one is taken once a tenant's log
has grown by ``state.snapshot_every`` entries or ``state.snapshot_mb`` of uploads since the
last, stored on the state server with the log truncated below it (serve/state/
shard_snapshots.py); a takeover starts from it when this node's copy does not follow the log.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from index.store.rows import DB_NAME
from index.store.shard import TenantShard
from serve.metrics import metrics
from serve.ops.backup_files import copy_database
from serve.shards.ownership import Ownership
from serve.state.database import StateConfig
from serve.state.shard_owners import Replayed
from serve.state.shard_snapshots import ShardSnapshots, SnapshotHead, catch_up

log = logging.getLogger("grounded")


class Snapshotter:
    """``scratch(tenant)``: a folder of this node's for the tenant's snapshot in transit."""

    def __init__(
        self, ownership: Ownership, state: StateConfig, scratch: Callable[[str], Path]
    ) -> None:
        self.ownership, self.scratch = ownership, scratch
        self.store = ShardSnapshots(ownership.owners)
        self.every, self.max_bytes = state.snapshot_every, state.snapshot_mb * 1e6
        self.grown: dict[str, tuple[int, int]] = {}  # tenant -> its log's (entries, bytes)
        self.taking: dict[str, asyncio.Task] = {}

    async def catch_up(self, shard: TenantShard, tenant: str, ingest: Callable) -> int:
        """Bring this node's copy up to the log, from the snapshot when the copy does not
        follow the log (serve/state/shard_snapshots.py ``catch_up``); entries replayed."""
        scratch = self.scratch(tenant)
        try:
            applied, state, restored = await asyncio.to_thread(
                catch_up, self.store, tenant, shard, ingest, scratch
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if restored:
            metrics().snapshots.inc(tags={"outcome": "restored"})
        self._grow(tenant, state.entries, state.bytes)
        return applied

    def written(self, shard: TenantShard, tenant: str, size: int) -> None:
        """One more entry (``size`` bytes of data) in the tenant's log: a snapshot is taken in
        the background once the log has grown enough."""
        entries, total = self.grown.get(tenant, (0, 0))
        self._grow(tenant, entries + 1, total + size)
        self._due(shard, tenant)

    def _due(self, shard: TenantShard, tenant: str) -> None:
        """A snapshot started when the log has grown enough and none is under way (one that
        ends with the log grown enough again, by the writes it let through, starts the next)."""
        entries, total = self.grown.get(tenant, (0, 0))
        if (entries < self.every and total < self.max_bytes) or tenant in self.taking:
            return
        task = asyncio.get_running_loop().create_task(self.take(shard, tenant))
        self.taking[tenant] = task

        def done(_) -> None:
            if self.taking.get(tenant) is task:
                self.taking.pop(tenant)
            if not task.cancelled() and task.exception() is None and task.result() is not None:
                self._due(shard, tenant)

        task.add_done_callback(done)

    def _grow(self, tenant: str, entries: int, size: int) -> None:
        self.grown[tenant] = (entries, size)
        metrics().shard_log.set(entries, tags={"tenant": tenant, "unit": "entries"})
        metrics().shard_log.set(size, tags={"tenant": tenant, "unit": "bytes"})

    async def take(self, shard: TenantShard, tenant: str) -> SnapshotHead | None:
        """A snapshot of the copy as of its log position (copied while no write is applied;
        readers and ingestions go on), stored fenced by the lease; None when this host no
        longer owns the tenant or the store failed (the log is kept: tried again later)."""
        ownership, scratch = self.ownership, self.scratch(tenant)
        copy = scratch / DB_NAME
        try:
            async with ownership.lock(tenant):
                if not ownership.holds(tenant):
                    return None
                lease, seq = ownership.held[tenant].lease, Replayed(shard.directory).get()
                grown = self.grown.get(tenant, (0, 0))
                scratch.mkdir(parents=True, exist_ok=True)
                await asyncio.to_thread(copy_database, shard.directory / DB_NAME, copy)
            head = await asyncio.to_thread(self.store.put, lease, seq, copy)
        except Exception as exc:
            log.warning("snapshot of tenant %r failed (its log is kept): %s", tenant, exc)
            metrics().snapshots.inc(tags={"outcome": "failed"})
            return None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if head is not None:  # what came while it was stored stays in the log
            now = self.grown.get(tenant, grown)
            self._grow(tenant, max(0, now[0] - grown[0]), max(0, now[1] - grown[1]))
            metrics().snapshots.inc(tags={"outcome": "stored"})
            log.info("tenant %r: snapshot at log entry %d (%d bytes) stored", tenant, seq,
                     head.bytes)  # fmt: skip
        return head
