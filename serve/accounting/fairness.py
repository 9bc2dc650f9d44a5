"""Fair admission in front of the generator: per-tenant queues sharing the engine's slots, and
preemption of a heavy tenant's prompt processing when a lighter tenant is kept waiting.

Each ingress replica sends at most ``slots`` generations to the engine at once, and of those at
most ``prefill_slots`` may still be processing their prompt (no first token yet). When a
request cannot be admitted it waits in its tenant's queue (at most ``queue_per_tenant``; 429
beyond), and a freed place goes to the waiting tenant with the fewest generations running,
ties broken by who was served longest ago (round robin).

Queuing alone gives a newcomer only its share of the engine: prompt processing is
compute-bound, and a flood's prompts in the engine slow the newcomer's as much as they slow
each other. So a request from a tenant with fewer generations running than another tenant by
two or more takes the place of that tenant's newest request still processing its prompt: the
victim is aborted in the engine (its client has seen nothing yet) and restarted from the head
of its tenant's queue, with vLLM's prefix cache keeping the blocks it had already computed.
A generation that has produced its first token is never interrupted.

Each admission carries a ``priority`` (how many of the tenant's generations were already
running) for vLLM's priority scheduler (``scheduling_policy: priority``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal, TypeVar

from index.errors import RateLimitError

T = TypeVar("T")
# Starts (or restarts) a generation: (priority, attempt) -> its stream. ``attempt`` counts
# restarts after preemption, so that each engine request can have its own id.
Start = Callable[[int, int], AsyncIterator[T]]
State = Literal["waiting", "prefilling", "decoding", "done"]


class Turn:
    """One request's place in the fair queue, from its arrival to the end of its generation."""

    def __init__(self, queue: FairQueue, tenant: str) -> None:
        self.queue, self.tenant = queue, tenant
        self.state: State = "waiting"
        self.priority = 0
        self.preemptions = 0
        self.admitted_at = 0
        self.ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.preempted = asyncio.Event()

    async def run(self, start: Start[T]) -> AsyncIterator[T]:
        """The generation's items; a generation preempted before its first item is aborted,
        waits for its turn again and restarts (the consumer sees one uninterrupted stream)."""
        while True:
            stream = start(self.priority, self.preemptions)
            first = await self._first_or_preempted(stream)
            if first is _PREEMPTED:
                await stream.aclose()
                await self.ticket
                continue
            self.queue._prefilled(self)
            if first is _ENDED:
                return
            yield first
            async for item in stream:
                yield item
            return

    async def _first_or_preempted(self, stream: AsyncIterator[T]):
        # Preemption is judged by the count, not the event: a preempted turn can be admitted
        # again (which clears the event) before this task wakes up.
        preemptions = self.preemptions
        item = asyncio.ensure_future(anext(stream))
        preempted = asyncio.ensure_future(self.preempted.wait())
        try:
            await asyncio.wait({item, preempted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            preempted.cancel()
            if not item.done():
                item.cancel()  # aborts the engine request (the generators' finally clauses)
                await asyncio.gather(item, return_exceptions=True)
        if self.preemptions != preemptions:  # even if the first item raced it: the place is gone
            if item.done() and not item.cancelled():
                item.exception()  # retrieved, so that asyncio does not log it
            return _PREEMPTED
        try:
            return item.result()
        except StopAsyncIteration:
            return _ENDED


_PREEMPTED, _ENDED = object(), object()


class FairQueue:
    def __init__(self, slots: int, queue_per_tenant: int, prefill_slots: int | None = None):
        if slots < 1 or queue_per_tenant < 0 or (prefill_slots is not None and prefill_slots < 1):
            raise ValueError("slots and prefill_slots must be >= 1 and queue_per_tenant >= 0")
        self.slots, self.queue_per_tenant = slots, queue_per_tenant
        self.prefill_slots = min(prefill_slots or slots, slots)
        self.running: Counter[str] = Counter()
        self.prefilling: list[Turn] = []
        self.waiting: dict[str, deque[Turn]] = {}
        self._served_at: dict[str, int] = {}
        self._turn = itertools.count()

    @property
    def busy(self) -> int:
        return sum(self.running.values())

    def queued(self, tenant: str) -> int:
        return len(self.waiting.get(tenant, ()))

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[Turn]:
        """Hold a place in the engine for one of ``tenant``'s generations; run the
        generation through the yielded Turn so that it can be preempted and restarted."""
        turn = Turn(self, tenant)
        if self._has_room() and not any(self.waiting.values()):
            self._admit(turn)
        else:
            if self.queued(tenant) >= self.queue_per_tenant:
                raise RateLimitError(
                    f"tenant {tenant!r} already has {self.queued(tenant)} requests waiting for "
                    f"the generator (limit {self.queue_per_tenant} per tenant) and "
                    f"{self.running[tenant]} running; retry shortly",
                    retry_after=2,
                )
            self.waiting.setdefault(tenant, deque()).append(turn)
            self._preempt_for(tenant)
            try:
                await turn.ticket
            except asyncio.CancelledError:
                self._release(turn)
                raise
        try:
            yield turn
        finally:
            self._release(turn)

    def _has_room(self) -> bool:
        return self.busy < self.slots and len(self.prefilling) < self.prefill_slots

    def _admit(self, turn: Turn) -> None:
        self.running[turn.tenant] += 1
        self.prefilling.append(turn)
        turn.state, turn.priority = "prefilling", self.running[turn.tenant] - 1
        turn.admitted_at = self._served_at[turn.tenant] = next(self._turn)
        turn.preempted.clear()
        if not turn.ticket.done():
            turn.ticket.set_result(None)

    def _prefilled(self, turn: Turn) -> None:
        if turn.state == "prefilling":
            self.prefilling.remove(turn)
            turn.state = "decoding"
            self._dispatch()

    def _preempt_for(self, tenant: str) -> None:
        """Give ``tenant`` the place of a heavier tenant's newest prompt still processing."""
        if self._has_room():
            self._dispatch()
            return
        mine = self.running[tenant]
        victims = [t for t in self.prefilling if self.running[t.tenant] >= mine + 2]
        if not victims:
            return
        victim = max(victims, key=lambda t: (self.running[t.tenant], t.admitted_at))
        self._unadmit(victim)
        victim.preemptions += 1
        victim.ticket = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(victim.tenant, deque()).appendleft(victim)
        victim.preempted.set()
        self._dispatch()

    def _unadmit(self, turn: Turn) -> None:
        self.running[turn.tenant] -= 1
        if self.running[turn.tenant] <= 0:
            del self.running[turn.tenant]
        if turn.state == "prefilling":
            self.prefilling.remove(turn)
        turn.state = "waiting"

    def _release(self, turn: Turn) -> None:
        if turn.state == "waiting":
            queue = self.waiting.get(turn.tenant)
            if queue and turn in queue:
                queue.remove(turn)
                if not queue:
                    del self.waiting[turn.tenant]
        elif turn.state != "done":
            self._unadmit(turn)
        turn.state = "done"
        self._dispatch()

    def _dispatch(self) -> None:
        while self._has_room():
            candidates = [t for t, q in self.waiting.items() if q]
            if not candidates:
                return
            tenant = min(candidates, key=lambda t: (self.running[t], self._served_at.get(t, -1)))
            turn = self.waiting[tenant].popleft()
            if not self.waiting[tenant]:
                del self.waiting[tenant]
            self._admit(turn)
