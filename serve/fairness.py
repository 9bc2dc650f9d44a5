"""Fair admission in front of the generator: per-tenant queues sharing a fixed number of slots.

Each ingress replica sends at most ``slots`` generations to the engine at once. When all slots
are taken, requests wait in their tenant's queue (at most ``queue_per_tenant``; 429 beyond), and
a freed slot goes to the waiting tenant with the fewest generations running, ties broken by who
was served longest ago (round robin). A tenant flooding the appliance therefore waits behind its
own requests, while a quiet tenant gets the next free slot. The slot's ``priority`` (how many of
the tenant's generations were already running) is passed to vLLM, whose priority scheduler
orders its own waiting queue the same way when it is configured with
``scheduling_policy: priority``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from index.errors import RateLimitError


class FairQueue:
    def __init__(self, slots: int, queue_per_tenant: int) -> None:
        if slots < 1 or queue_per_tenant < 0:
            raise ValueError("slots must be >= 1 and queue_per_tenant >= 0")
        self.slots, self.queue_per_tenant = slots, queue_per_tenant
        self.running: Counter[str] = Counter()
        self.waiting: dict[str, deque[asyncio.Future]] = {}
        self._served_at: dict[str, int] = {}
        self._turn = itertools.count()

    @property
    def busy(self) -> int:
        return sum(self.running.values())

    def queued(self, tenant: str) -> int:
        return len(self.waiting.get(tenant, ()))

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[int]:
        """Hold one generation slot for ``tenant``; yields its priority (0 = first)."""
        if self.busy >= self.slots or any(self.waiting.values()):
            queue = self.waiting.setdefault(tenant, deque())
            if len(queue) >= self.queue_per_tenant:
                raise RateLimitError(
                    f"tenant {tenant!r} already has {len(queue)} requests waiting for the "
                    f"generator (limit {self.queue_per_tenant} per tenant) and "
                    f"{self.running[tenant]} running; retry shortly",
                    retry_after=2,
                )
            ticket = asyncio.get_running_loop().create_future()
            queue.append(ticket)
            try:
                await ticket  # _dispatch counted us as running before waking us
            except asyncio.CancelledError:
                if ticket.done() and not ticket.cancelled():
                    self._release(tenant)  # woken and cancelled at once: give the slot back
                else:
                    queue.remove(ticket)
                raise
        else:
            self._take(tenant)
        try:
            yield self.running[tenant] - 1
        finally:
            self._release(tenant)

    def _take(self, tenant: str) -> None:
        self.running[tenant] += 1
        self._served_at[tenant] = next(self._turn)

    def _release(self, tenant: str) -> None:
        self.running[tenant] -= 1
        if self.running[tenant] <= 0:
            del self.running[tenant]
        self._dispatch()

    def _dispatch(self) -> None:
        while self.busy < self.slots:
            candidates = [t for t, q in self.waiting.items() if q]
            if not candidates:
                return
            tenant = min(candidates, key=lambda t: (self.running[t], self._served_at.get(t, -1)))
            ticket = self.waiting[tenant].popleft()
            if not self.waiting[tenant]:
                del self.waiting[tenant]
            self._take(tenant)
            ticket.set_result(None)
