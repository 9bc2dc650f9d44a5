"""Fair admission: per-tenant queues sharing the generator's slots."""

from __future__ import annotations

import asyncio

import pytest

from index.errors import RateLimitError
from serve.fairness import FairQueue

pytestmark = pytest.mark.unit


async def hold(queue: FairQueue, tenant: str, order: list, release: asyncio.Event):
    async with queue.slot(tenant) as priority:
        order.append((tenant, priority))
        await release.wait()


def test_a_quiet_tenant_gets_the_next_slot_ahead_of_a_flooding_tenants_backlog():
    async def scenario():
        queue, order = FairQueue(slots=2, queue_per_tenant=10), []
        releases = [asyncio.Event() for _ in range(8)]
        tasks = [asyncio.create_task(hold(queue, "flood", order, releases[i])) for i in range(6)]
        await asyncio.sleep(0)
        assert queue.busy == 2 and queue.queued("flood") == 4
        tasks.append(asyncio.create_task(hold(queue, "quiet", order, releases[6])))
        await asyncio.sleep(0)
        releases[0].set()  # one flood generation ends
        await asyncio.sleep(0.01)
        assert order[-1] == ("quiet", 0)  # not the flood's third request
        for release in releases:
            release.set()
        await asyncio.gather(*tasks)
        return order

    order = asyncio.run(scenario())
    assert [t for t, _ in order].count("flood") == 6


def test_waiting_tenants_are_served_round_robin():
    async def scenario():
        queue, order = FairQueue(slots=1, queue_per_tenant=10), []
        gate = asyncio.Event()
        first = asyncio.create_task(hold(queue, "a", order, gate))
        await asyncio.sleep(0)
        done = asyncio.Event()
        done.set()
        rest = [asyncio.create_task(hold(queue, t, order, done)) for t in "aaabbc"]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(first, *rest)
        return [t for t, _ in order]

    # "a" was served first, so b and c (never served) go before a's backlog, then alternate
    assert asyncio.run(scenario()) == ["a", "b", "c", "a", "b", "a", "a"]


def test_a_full_tenant_queue_is_429_and_other_tenants_still_queue():
    async def scenario():
        queue, order = FairQueue(slots=1, queue_per_tenant=1), []
        gate = asyncio.Event()
        running = asyncio.create_task(hold(queue, "a", order, gate))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(hold(queue, "a", order, gate))
        await asyncio.sleep(0)
        with pytest.raises(RateLimitError, match="1 requests waiting") as refused:
            async with queue.slot("a"):
                pass
        other = asyncio.create_task(hold(queue, "b", order, gate))
        await asyncio.sleep(0)
        assert queue.queued("b") == 1
        gate.set()
        await asyncio.gather(running, waiting, other)
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.status == 429 and refused.retry_after >= 1 and refused.reason == "queue"


def test_a_cancelled_waiter_leaves_the_queue_and_a_cancelled_holder_frees_its_slot():
    async def scenario():
        queue, order = FairQueue(slots=1, queue_per_tenant=5), []
        gate = asyncio.Event()
        holder = asyncio.create_task(hold(queue, "a", order, gate))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold(queue, "b", order, gate))
        await asyncio.sleep(0)
        waiter.cancel()  # the client went away while queued
        await asyncio.sleep(0)
        assert queue.queued("b") == 0
        holder.cancel()
        await asyncio.sleep(0)
        assert queue.busy == 0
        async with queue.slot("c") as priority:
            assert priority == 0
        return order

    assert asyncio.run(scenario()) == [("a", 0)]


def test_priority_counts_the_tenants_generations_already_running():
    async def scenario():
        queue, order = FairQueue(slots=4, queue_per_tenant=5), []
        gate = asyncio.Event()
        tasks = [asyncio.create_task(hold(queue, t, order, gate)) for t in "aab"]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == [("a", 0), ("a", 1), ("b", 0)]
