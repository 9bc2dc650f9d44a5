"""Fair admission: per-tenant queues sharing the generator's slots, and preemption of a heavy
tenant's prompt processing."""

from __future__ import annotations

import asyncio

import pytest

from index.errors import RateLimitError
from serve.accounting.fairness import FairQueue

pytestmark = pytest.mark.unit


async def hold(queue: FairQueue, tenant: str, order: list, release: asyncio.Event):
    async with queue.slot(tenant) as turn:
        order.append((tenant, turn.priority))
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
        async with queue.slot("c") as turn:
            assert turn.priority == 0
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


class Engine:
    """Streams whose prompt processing and decoding the test finishes by hand."""

    def __init__(self) -> None:
        self.prefilled: dict[str, asyncio.Event] = {}
        self.finished: dict[str, asyncio.Event] = {}
        self.started: list[tuple[str, int, int]] = []
        self.aborted: list[tuple[str, int]] = []

    def start(self, name: str):
        self.prefilled[name], self.finished[name] = asyncio.Event(), asyncio.Event()
        return lambda priority, attempt: self._stream(name, priority, attempt)

    async def _stream(self, name: str, priority: int, attempt: int):
        self.started.append((name, priority, attempt))
        done = False
        try:
            await self.prefilled[name].wait()
            yield f"{name} first token (attempt {attempt})"
            await self.finished[name].wait()
            yield f"{name} last token"
            done = True
        finally:
            if not done:
                self.aborted.append((name, attempt))


async def generate(queue: FairQueue, tenant: str, engine: Engine, name: str, seen: dict):
    start = engine.start(name)
    async with queue.slot(tenant) as turn:
        seen[name] = [item async for item in turn.run(start)]


def test_a_light_tenant_takes_the_place_of_a_heavy_tenants_prompt_still_processing():
    async def scenario():
        queue, engine, seen = FairQueue(slots=4, queue_per_tenant=10, prefill_slots=1), Engine(), {}
        flood = [asyncio.create_task(generate(queue, "flood", engine, f"f{i}", seen))
                 for i in range(3)]  # fmt: skip
        await asyncio.sleep(0.01)
        engine.prefilled["f0"].set()  # f0 decodes; f1 is processing its prompt; f2 waits
        await asyncio.sleep(0.01)
        assert [s[0] for s in engine.started] == ["f0", "f1"] and queue.queued("flood") == 1
        quiet = asyncio.create_task(generate(queue, "quiet", engine, "q", seen))
        await asyncio.sleep(0.01)
        assert engine.aborted == [("f1", 0)]  # flood had 2 running, quiet none
        assert engine.started[-1] == ("q", 0, 0)
        assert queue.waiting["flood"][0].preemptions == 1  # f1 back at the head
        engine.prefilled["q"].set()  # quiet's first token frees the prompt slot: f1 again
        await asyncio.sleep(0.01)
        assert engine.started[-1] == ("f1", 1, 1)
        for name in ("f0", "f1", "f2", "q"):
            engine.prefilled[name].set()
            engine.finished[name].set()
        await asyncio.gather(*flood, quiet)
        return seen

    seen = asyncio.run(scenario())
    # the consumer of the preempted generation sees one stream: the restarted one
    assert seen["f1"] == ["f1 first token (attempt 1)", "f1 last token"]
    assert seen["q"] == ["q first token (attempt 0)", "q last token"]


def test_tenants_with_equal_shares_and_decoding_generations_are_never_preempted():
    async def scenario():
        queue, engine, seen = FairQueue(slots=2, queue_per_tenant=10, prefill_slots=1), Engine(), {}
        a = asyncio.create_task(generate(queue, "a", engine, "a0", seen))
        await asyncio.sleep(0.01)
        b = asyncio.create_task(generate(queue, "b", engine, "b0", seen))
        await asyncio.sleep(0.01)
        assert engine.aborted == [] and queue.queued("b") == 1  # a has 1 running, b 0: no
        engine.prefilled["a0"].set()  # a decodes; b gets the prompt slot
        await asyncio.sleep(0.01)
        c = asyncio.create_task(generate(queue, "c", engine, "c0", seen))
        engine.prefilled["b0"].set()  # both slots decoding: c waits, nobody is interrupted
        await asyncio.sleep(0.01)
        assert engine.aborted == [] and queue.queued("c") == 1
        for name in ("a0", "b0", "c0"):
            engine.prefilled[name].set()
            engine.finished[name].set()
        await asyncio.gather(a, b, c)
        return engine

    engine = asyncio.run(scenario())
    assert engine.aborted == [] and [s[0] for s in engine.started] == ["a0", "b0", "c0"]


def test_a_preempted_request_whose_client_leaves_while_waiting_frees_everything():
    async def scenario():
        queue, engine, seen = FairQueue(slots=2, queue_per_tenant=10, prefill_slots=1), Engine(), {}
        f0 = asyncio.create_task(generate(queue, "flood", engine, "f0", seen))
        await asyncio.sleep(0.01)
        engine.prefilled["f0"].set()
        await asyncio.sleep(0.01)
        f1 = asyncio.create_task(generate(queue, "flood", engine, "f1", seen))
        await asyncio.sleep(0.01)
        quiet = asyncio.create_task(generate(queue, "quiet", engine, "q", seen))
        await asyncio.sleep(0.01)
        assert engine.aborted == [("f1", 0)] and queue.queued("flood") == 1
        f1.cancel()  # its client goes away while it waits to restart
        await asyncio.gather(f1, return_exceptions=True)
        assert queue.queued("flood") == 0 and queue.busy == 2
        for name in ("f0", "q"):
            engine.prefilled[name].set()
            engine.finished[name].set()
        await asyncio.gather(f0, quiet)
        return queue

    queue = asyncio.run(scenario())
    assert queue.busy == 0 and not queue.prefilling and not queue.waiting


def test_a_preempted_generation_admitted_again_before_it_wakes_still_restarts():
    async def scenario():
        queue, engine, seen = FairQueue(slots=3, queue_per_tenant=10, prefill_slots=1), Engine(), {}
        f0 = asyncio.create_task(generate(queue, "flood", engine, "f0", seen))
        await asyncio.sleep(0.01)
        engine.prefilled["f0"].set()
        await asyncio.sleep(0.01)
        f1 = asyncio.create_task(generate(queue, "flood", engine, "f1", seen))
        await asyncio.sleep(0.01)
        async with queue.slot("quiet") as turn:  # takes f1's place...
            queue._prefilled(turn)  # ...and has its first token at once: f1 is admitted again
            assert engine.aborted == []  # all before f1's task has run
        await asyncio.sleep(0.01)
        assert engine.aborted == [("f1", 0)] and engine.started[-1] == ("f1", 1, 1)
        for name in ("f0", "f1"):
            engine.prefilled[name].set()
            engine.finished[name].set()
        await asyncio.gather(f0, f1)
        return seen

    seen = asyncio.run(scenario())
    assert seen["f1"] == ["f1 first token (attempt 1)", "f1 last token"]
