"""With several nodes (``state.url``): which tenants a ShardHost owns, fenced in time.

A host owns a tenant under a lease on the state server (serve/state/shard_owners.py). It
serves the tenant, reads as well as writes, only before a local deadline: the monotonic clock
read before the acquire or renew that the server granted, plus the lease's length, minus a
margin for the two clocks' rates (DRIFT). Past it the host no longer owns the tenant, whatever
its renewals are doing (stuck on a frozen link, failing, or not scheduled): the next request
takes the lease again, bringing this node's copy up to the log first, or is refused because
another replica holds it. So a host cut off from the state server stops answering for a tenant
before another can have taken it over, and never answers with access lists older than the log.

Renewals run every third of a lease in one task, restarted when it has ended; any failure of a
renewal leaves the tenant to its deadline, and a lease the server says is lost is dropped at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from index.errors import GroundedError
from index.store.shard import TenantShard
from serve.metrics import metrics
from serve.state.shard_owners import LeaseLostError, ShardLease, ShardOwners

log = logging.getLogger("grounded")
DRIFT = 0.1  # the share of a lease kept back from the local deadline


class Placement(Protocol):
    """Where the host runs: its node (the folder of its shards with several nodes) and the
    holder name its leases carry."""

    def node(self) -> str: ...

    def holder(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Held:
    lease: ShardLease
    deadline: float  # the monotonic clock's time past which the tenant is no longer served


class Ownership:
    """``clock``: monotonic seconds (injected for tests)."""

    def __init__(
        self,
        owners: ShardOwners,
        placement: Placement,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.owners, self.placement, self.clock = owners, placement, clock
        self.held: dict[str, Held] = {}
        self.writing: dict[str, asyncio.Lock] = {}  # tenant -> its writes, one at a time
        self._renewing: asyncio.Task | None = None

    def lock(self, tenant: str) -> asyncio.Lock:
        return self.writing.setdefault(tenant, asyncio.Lock())

    def holds(self, tenant: str) -> bool:
        """This host owns ``tenant`` now: its lease was granted or renewed recently enough.
        A lease past its deadline is dropped here."""
        held = self.held.get(tenant)
        if held is None:
            return False
        if self.clock() < held.deadline:
            return True
        log.warning("lease on tenant %r not renewed in time: no longer served here", tenant)
        self.held.pop(tenant, None)
        self._count("expired")
        return False

    def healthy(self) -> bool:
        """Renewals run whenever a lease is held (a replica without them is restarted)."""
        return not self.held or (self._renewing is not None and not self._renewing.done())

    def _count(self, outcome: str | None = None) -> None:
        m = metrics()
        if outcome is not None:
            m.lease_renewals.inc(tags={"outcome": outcome})
        m.shard_leases.set(len(self.held))

    def _deadline(self, asked_at: float) -> float:
        return asked_at + self.owners.lease_s * (1 - DRIFT)

    async def take(
        self,
        tenant: str,
        load: Callable[[], Awaitable[TenantShard]],
        replay_into: Callable[[TenantShard], Awaitable[int]],
        loaded: Callable[[str], bool],
    ) -> TenantShard:
        """Take ``tenant``'s lease (ShardOwnedElsewhereError, a 503, while another replica
        holds it), then ``load`` its shard and ``replay_into`` it what the log holds beyond
        this node's copy (how many entries), the lease renewed while it runs; should it still
        run out, it is taken again and what came meanwhile replayed. ``loaded(tenant)``: the
        shard is still open here (an evicted one's lease is given back)."""
        holder, node = self.placement.holder(), self.placement.node()
        asked = self.clock()
        lease = await asyncio.to_thread(self.owners.acquire, tenant, holder, node)
        try:
            shard = await load()
            started, applied = time.perf_counter(), 0
            while True:
                kept = [lease]
                keeper = asyncio.get_running_loop().create_task(self._keep(kept))
                try:
                    applied += await replay_into(shard)
                finally:
                    keeper.cancel()
                lease, asked = kept[0], self.clock()
                try:
                    lease = await asyncio.to_thread(self.owners.renew, lease)
                    break
                except LeaseLostError:  # ran out during the replay: again, if still free
                    lease = await asyncio.to_thread(self.owners.acquire, tenant, holder, node)
        except BaseException:  # its next owner need not wait for the lease to run out
            with contextlib.suppress(GroundedError):
                await asyncio.to_thread(self.owners.release, lease)
            raise
        replayed_s = time.perf_counter() - started
        if applied:
            log.info("took tenant %r over: %d logged writes replayed in %.1f s", tenant, applied,
                     replayed_s)  # fmt: skip
        self.held[tenant] = Held(lease, self._deadline(asked))
        m = metrics()
        m.takeovers.inc()
        m.add(m.replayed_entries, applied)
        m.replay_seconds.observe(replayed_s)
        self._count()
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self._renew(loaded))
        return shard

    async def _keep(self, kept: list[ShardLease]) -> None:
        """While a replay runs, its lease (``kept[0]``) renewed every third of its length."""
        while True:
            await asyncio.sleep(self.owners.lease_s / 3)
            try:
                kept[0] = await asyncio.to_thread(self.owners.renew, kept[0])
            except LeaseLostError:
                return  # the renewal after the replay finds it out and takes it again
            except Exception as exc:  # the next try, or the renewal after the replay, decides
                log.warning("renewing tenant %r's lease during its replay failed: %s",
                            kept[0].tenant, exc)  # fmt: skip

    async def _renew(self, loaded: Callable[[str], bool]) -> None:
        """Every third of a lease, all of this host's leases in one statement."""
        while self.held:
            await asyncio.sleep(self.owners.lease_s / 3)
            for tenant in [t for t in self.held if not loaded(t)]:  # evicted: given back
                evicted = self.held.pop(tenant)
                with contextlib.suppress(Exception):  # else it runs out
                    await asyncio.to_thread(self.owners.release, evicted.lease)
            held, asked = dict(self.held), self.clock()
            try:
                renewed = await asyncio.to_thread(
                    self.owners.renew_all, [h.lease for h in held.values()]
                )
            except Exception as exc:  # the deadlines decide (StateUnavailableError, ...)
                log.warning("renewing %d tenant leases failed: %s", len(held), exc)
                self._count("failed")
                continue
            for tenant, was in held.items():
                if tenant not in renewed:
                    log.warning("lease on tenant %r lost (run out, or taken over)", tenant)
                    if self.held.get(tenant) is was:
                        self.held.pop(tenant, None)
                    self._count("lost")
                elif self.held.get(tenant) is was:
                    self.held[tenant] = Held(renewed[tenant], self._deadline(asked))
                    self._count("renewed")

    async def logged(self, tenant: str, op: str, meta: dict, data: bytes | None = None) -> int:
        """Log a write on the state server before it is applied, fenced twice: this host's
        deadline, then the server's check of the lease. The caller holds ``lock(tenant)``."""
        if not self.holds(tenant):  # lost since the request began
            raise LeaseLostError(f"this replica no longer owns tenant {tenant!r}'s shard; retry")
        try:
            return await asyncio.to_thread(self.owners.append, self.held[tenant].lease, op, meta,
                                           data)  # fmt: skip
        except LeaseLostError:
            self.held.pop(tenant, None)
            raise

    def stop(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()

    def release_all(self) -> None:
        """Stop renewing and give every lease back (a replica shutting down)."""
        self.stop()
        for tenant in list(self.held):
            held = self.held.pop(tenant)
            try:
                self.owners.release(held.lease)
            except Exception as exc:  # it runs out instead
                log.warning("giving tenant %r's lease back failed: %s", tenant, exc)
        self._count()
