"""A tenant's requests reach the replica that owns its shard (several nodes): a Shards replica
takes the tenant's lease before it loads the shard, so a replica refused the lease never counts
the tenant loaded in Serve's routing (serve/shards/host.py); and the ingress sends a
request refused by a replica that does not own the tenant again (serve/shards/tenant.py)."""

from __future__ import annotations

import asyncio

import pytest
from ray.exceptions import RayTaskError

import serve.shards.tenant as tenant_shards
from index.config import IndexConfig
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.shards.host import ShardHost
from serve.shards.ownership import Ownership
from serve.shards.tenant import to_owner
from serve.state.shard_owners import (
    LeaseLostError,
    Replayed,
    ShardLease,
    ShardOwnedElsewhereError,
    replay,
)

pytestmark = pytest.mark.unit
TENANT = "acme"


def held() -> ShardOwnedElsewhereError:
    """The refusal as the ingress receives it from a replica: wrapped by Ray."""
    cause = ShardOwnedElsewhereError(f"tenant {TENANT!r}'s shard is held by r2", retry_after=4)
    return RayTaskError("Shards.search", "traceback", cause).as_instanceof_cause()


def lost() -> LeaseLostError:
    """A write refused by a replica whose lease ran out (nothing logged, nothing applied)."""
    cause = LeaseLostError(f"this replica no longer owns tenant {TENANT!r}'s shard")
    return RayTaskError("Shards.upload", "traceback", cause).as_instanceof_cause()


class Calls:
    """A Shards call that is refused ``refusals`` times, then answers."""

    def __init__(self, refusals: int, error=held) -> None:
        self.refusals, self.error, self.count = refusals, error, 0

    async def __call__(self) -> str:
        self.count += 1
        if self.count <= self.refusals:
            raise self.error()
        return "hits"


@pytest.fixture
def no_waits(monkeypatch):
    monkeypatch.setattr(tenant_shards, "RESEND_AFTER_S", (0.0, 0.0, 0.0))


@pytest.mark.parametrize("refusal", [held, lost], ids=["owned elsewhere", "lease lost"])
def test_a_request_refused_by_a_replica_that_does_not_own_the_tenant_is_sent_again(
    no_waits, refusal
):
    call = Calls(refusals=2, error=refusal)
    assert asyncio.run(to_owner(call)) == "hits"
    assert call.count == 3


def test_the_refusal_reaches_the_client_once_the_retries_are_spent(no_waits):
    call = Calls(refusals=10)
    with pytest.raises(ShardOwnedElsewhereError) as refused:
        asyncio.run(to_owner(call))
    assert call.count == 4  # the first try and one per wait
    assert "held by r2" in refused.value.message  # the 503's message (serve/http/api.py)
    assert refused.value.retry_after == 4  # the lease's remaining time: its Retry-After


def test_other_failures_are_not_sent_again(no_waits):
    call = Calls(refusals=1, error=lambda: ValueError("bad request"))
    with pytest.raises(ValueError, match="bad request"):
        asyncio.run(to_owner(call))
    assert call.count == 1


class Owners:
    """The lease server as a Shards replica sees it: free, or held by another replica."""

    lease_s = 60.0

    def __init__(self, events: list[str], held_elsewhere: bool, runs_out: int = 0) -> None:
        self.events, self.held_elsewhere, self.runs_out = events, held_elsewhere, runs_out

    def acquire(self, tenant: str, holder: str, node: str) -> ShardLease:
        self.events.append("acquire")
        if self.held_elsewhere:
            raise ShardOwnedElsewhereError(f"tenant {tenant!r}'s shard is held by r2")
        return ShardLease(tenant, holder, node, token=1, expires=1e12)

    def entries(self, tenant: str, after: int = 0):
        self.events.append("replay")
        return iter(())

    def renew(self, lease: ShardLease) -> ShardLease:
        self.events.append("renew")
        if self.runs_out:  # the lease ran out while the replica replayed
            self.runs_out -= 1
            raise LeaseLostError(f"lease on {lease.tenant!r} lost")
        return lease

    def release(self, lease: ShardLease) -> None:
        self.events.append("release")

    def renew_all(self, leases: list[ShardLease]) -> dict[str, ShardLease]:
        return {lease.tenant: self.renew(lease) for lease in leases}


class Placement:
    """Where the replica runs: node n1, replica r1."""

    def node(self) -> str:
        return "n1"

    def holder(self) -> str:
        return "r1"


@pytest.fixture
def replica(tmp_path):
    """The ShardHost of a Shards replica of a cluster (several nodes), outside Ray: its lease
    server and the shard loads Serve would run recorded in ``events``."""
    service = IndexService(IndexConfig(), tmp_path, embedder=HashingEmbedder()).start()
    host = ShardHost(load_config(None, data_dir=tmp_path), lambda root: service, Placement())
    host.events, host.fail_load = [], False

    async def load(tenant: str):  # Serve's multiplexed load: the tenant counts as loaded here
        host.events.append("load")
        if host.fail_load:
            raise OSError("disk full")
        shard = service.open_shard(tenant, create=True)
        host.loaded[tenant] = shard
        return shard

    host.get_shard = load
    return host


class Snapshots:
    """The snapshot side of a takeover (serve/shards/snapshots.py) with no snapshot stored:
    the whole log replayed into the node's copy."""

    def __init__(self, owners: Owners) -> None:
        self.owners = owners

    async def catch_up(self, shard, tenant: str, ingest) -> int:
        position = Replayed(shard.directory)
        return await asyncio.to_thread(replay, self.owners, tenant, position, ingest, shard)

    def written(self, shard, tenant: str, size: int) -> None:
        pass


def own(host: ShardHost, held_elsewhere: bool = False, runs_out: int = 0):
    """The replica's shard for the tenant, as a request gets it; its renewals stopped."""
    owners = Owners(host.events, held_elsewhere, runs_out)
    if host.ownership is None:
        host.ownership = Ownership(owners, Placement())
    host.ownership.owners, host.snapshots = owners, Snapshots(owners)

    async def request():
        try:
            return await host.shard(TENANT)
        finally:
            host.ownership.stop()

    return asyncio.run(request())


def test_a_replica_refused_the_lease_never_loads_the_tenant(replica):
    with pytest.raises(ShardOwnedElsewhereError, match="held by r2"):
        own(replica, held_elsewhere=True)
    assert replica.events == ["acquire"]  # Serve never began to load it: no routing to it
    assert TENANT not in replica.ownership.held


def test_the_owner_takes_the_lease_then_loads_and_replays(replica):
    shard = own(replica)
    assert replica.events == ["acquire", "load", "replay", "renew"]
    assert replica.ownership.held[TENANT].lease.holder == "r1" and shard.tenant == TENANT
    own(replica)  # owned: later requests only load (Serve's cache)
    assert replica.events == ["acquire", "load", "replay", "renew", "load"]


def test_a_replay_that_outlasts_the_lease_takes_it_again_and_replays_what_came_meanwhile(
    replica,
):
    own(replica, runs_out=1)
    assert replica.events == ["acquire", "load", "replay", "renew", "acquire", "replay", "renew"]
    assert TENANT in replica.ownership.held


def test_a_load_that_fails_gives_the_lease_back(replica):
    replica.fail_load = True
    with pytest.raises(OSError, match="disk full"):
        own(replica)
    assert replica.events == ["acquire", "load", "release"]
    assert TENANT not in replica.ownership.held
