"""A host's ownership of tenants with several nodes (serve/shards/ownership.py): a tenant is
served only before a local deadline taken before the lease was granted or renewed, and the
renewals survive any failure. The lease server is a stand-in here; tests/integration/
test_state.py freezes a real one's link."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve.shards.ownership import DRIFT, Ownership
from serve.state.shard_owners import LeaseLostError, ShardLease

pytestmark = pytest.mark.unit
TENANT = "acme"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Owners:
    """The lease server: grants, renews (or fails as told), logs appends."""

    lease_s = 0.03  # the renewal loop wakes every 10 ms

    def __init__(self) -> None:
        self.renewals, self.appended, self.fail = 0, [], None

    def acquire(self, tenant: str, holder: str, node: str) -> ShardLease:
        return ShardLease(tenant, holder, node, token=1, expires=1e12)

    def renew(self, lease: ShardLease) -> ShardLease:
        self.renewals += 1
        if self.fail is not None:
            raise self.fail
        return lease

    def renew_all(self, leases: list[ShardLease]) -> dict[str, ShardLease]:
        """As the server answers: the renewed leases; one lost is missing from the answer."""
        try:
            return {lease.tenant: self.renew(lease) for lease in leases}
        except LeaseLostError:
            return {}

    def release(self, lease: ShardLease) -> None:
        pass

    def append(self, lease, op, meta, data) -> int:
        self.appended.append(op)
        return len(self.appended)


class Here:
    def node(self) -> str:
        return "n1"

    def holder(self) -> str:
        return "r1"


async def taken(ownership: Ownership) -> None:
    async def load():
        return "shard"

    async def replay_into(shard) -> int:
        return 0

    await ownership.take(TENANT, load, replay_into, lambda tenant: True)


def test_a_tenant_is_served_only_before_its_local_deadline():
    clock, owners = Clock(), Owners()
    ownership = Ownership(owners, Here(), clock)

    async def scenario():
        await taken(ownership)
        ownership.stop()
        assert ownership.holds(TENANT)
        clock.now += owners.lease_s * (1 - DRIFT) - 1e-6
        assert ownership.holds(TENANT)
        clock.now += 2e-6  # past it: dropped, whatever the server still says
        assert not ownership.holds(TENANT) and TENANT not in ownership.held
        with pytest.raises(LeaseLostError):
            await ownership.logged(TENANT, "delete", {"doc_id": "d"})
        assert owners.appended == []  # refused here, before the server was asked

    asyncio.run(scenario())


def test_renewals_survive_any_failure_and_the_deadline_decides():
    clock, owners = Clock(), Owners()
    ownership = Ownership(owners, Here(), clock)

    async def scenario():
        await taken(ownership)
        owners.fail = RuntimeError("the driver broke")
        await asyncio.sleep(0.05)
        assert owners.renewals >= 2 and not ownership._renewing.done()  # still renewing
        assert ownership.holds(TENANT)  # until its deadline
        owners.fail = None
        renewals = owners.renewals
        await asyncio.sleep(0.03)
        assert owners.renewals > renewals
        clock.now += 10 * owners.lease_s  # a renewal that succeeds moves the deadline on
        await asyncio.sleep(0.03)
        assert ownership.holds(TENANT)
        owners.fail = LeaseLostError("taken over")
        await asyncio.sleep(0.03)
        assert TENANT not in ownership.held  # the server says so: dropped at once
        ownership.stop()

    asyncio.run(scenario())


class Recorded:
    """serve/metrics.py's series as a list of (series, value, tags)."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def __getattr__(self, series: str):
        seen = self.seen

        class Series:
            def inc(self, value=1, tags=None):
                seen.append((series, value, tags))

            def set(self, value, tags=None):
                seen.append((series, value, tags))

            def observe(self, value, tags=None):
                seen.append((series, "observed", tags))

        return Series()

    def add(self, counter, value, tags=None):
        if value > 0:
            counter.inc(value, tags)


def test_renewals_takeovers_and_health_are_visible(monkeypatch):
    import serve.shards.ownership as ownership_module

    recorded = Recorded()
    monkeypatch.setattr(ownership_module, "metrics", lambda: recorded)
    clock, owners = Clock(), Owners()
    ownership = Ownership(owners, Here(), clock)

    async def scenario():
        await taken(ownership)
        assert ownership.healthy()
        await asyncio.sleep(0.025)  # a renewal or two
        owners.fail = LeaseLostError("taken over")
        await asyncio.sleep(0.03)
        owners.fail = None
        await taken(ownership)
        ownership.stop()
        await asyncio.sleep(0)
        assert not ownership.healthy()  # a lease held, no renewals: Serve restarts it

    asyncio.run(scenario())
    outcomes = [tags["outcome"] for series, _, tags in recorded.seen if series == "lease_renewals"]
    assert outcomes[0] == "renewed" and "lost" in outcomes
    assert [s for s, *_ in recorded.seen].count("takeovers") == 2
    assert ("shard_leases", 0, None) in recorded.seen and ("shard_leases", 1, None) in recorded.seen


class Expiring(Owners):
    """A lease server whose leases run out ``lease_s`` after their last grant (real time)."""

    def __init__(self) -> None:
        super().__init__()
        self.acquires, self.granted, self.released = 0, 0.0, []

    def acquire(self, tenant: str, holder: str, node: str) -> ShardLease:
        self.acquires += 1
        self.granted = time.monotonic()
        return super().acquire(tenant, holder, node)

    def renew(self, lease: ShardLease) -> ShardLease:
        if time.monotonic() - self.granted > self.lease_s:
            raise LeaseLostError("ran out")
        self.granted = time.monotonic()
        return super().renew(lease)

    def release(self, lease: ShardLease) -> None:
        self.released.append(lease.tenant)


def test_a_replay_longer_than_the_lease_keeps_it_and_an_evicted_shards_lease_is_given_back():
    owners, open_here = Expiring(), {TENANT}
    ownership = Ownership(owners, Here())

    async def scenario():
        async def load():
            return "shard"

        async def slow_replay(shard) -> int:
            await asyncio.sleep(owners.lease_s * 3)  # three leases long
            return 40

        # bounded: this stand-in's replay is always long, so losing the lease would loop
        taking = ownership.take(TENANT, load, slow_replay, lambda tenant: tenant in open_here)
        await asyncio.wait_for(taking, 5)
        assert owners.acquires == 1 and owners.renewals >= 3  # renewed while it replayed
        assert ownership.holds(TENANT)
        open_here.clear()  # Serve's LRU closed the shard
        await asyncio.sleep(owners.lease_s)
        assert owners.released == [TENANT] and TENANT not in ownership.held
        ownership.stop()

    asyncio.run(scenario())
