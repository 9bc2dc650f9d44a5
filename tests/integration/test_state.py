"""Shared state on a real PostgreSQL server (serve/state.py): the usage ledger of several
ingress replicas, each its own process, deciding against one tenant's budget."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest

from index.errors import RateLimitError
from serve.budgets import Budget, BudgetsConfig, Ledger
from serve.state import StateConfig, StateUnavailableError

pytestmark = pytest.mark.integration

NOW = 1_800_000_030.0  # one fixed minute: every request lands in the same window
LIMIT = 40_000  # tokens per minute for the tenant: far less than the requests ask for


def _replica(url: str, tenant: str, replica: int, requests: int, threads: int) -> list:
    """One ingress replica: ``requests`` requests at once (``threads`` in flight), each
    reserving, then settling and recording what it used, or recording its refusal."""
    config = BudgetsConfig(tenants={tenant: Budget(tokens_per_minute=LIMIT)})
    ledger = Ledger("/nonexistent", config, clock=lambda: NOW, state=StateConfig(url=url))
    rng = random.Random(replica)
    asks = [rng.randint(50, 400) for _ in range(requests)]

    def one(ask: int) -> tuple[str, int]:
        try:
            lease = ledger.reserve(tenant, f"key-{replica}", Budget(), ask)
        except RateLimitError as exc:
            ledger.record(tenant, f"key-{replica}", "refused", reason=exc.reason)
            return "refused", 0
        used = ask - rng.randint(0, 40)
        ledger.settle(lease, used)
        ledger.record(tenant, f"key-{replica}", "answered", prompt=used - 10, completion=10)
        return "answered", used

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, asks))
    ledger.close()
    return results


def test_two_replicas_never_overspend_a_budget_and_lose_no_record(postgres):
    tenant = "budgeted"
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(2) as pool:
        runs = pool.starmap(_replica, [(postgres.url, tenant, r, 500, 16) for r in (0, 1)])
    results = [r for run in runs for r in run]
    spent = sum(used for _, used in results)
    answered = sum(outcome == "answered" for outcome, _ in results)

    ledger = Ledger("/nonexistent", BudgetsConfig(), clock=lambda: NOW,
                    state=StateConfig(url=postgres.url))  # fmt: skip
    rows = ledger.usage(tenant)
    assert len(results) == 1_000
    assert sum(row.requests for row in rows) == 1_000  # no record lost
    assert sum(row.answered for row in rows) == answered
    assert sum(row.prompt_tokens + row.completion_tokens for row in rows) == spent
    assert ledger.used(f"tenant:{tenant}", "minute") == spent  # the window is what was used
    assert spent <= LIMIT  # never over, across both replicas
    assert answered < 1_000 and spent > LIMIT * 0.9  # the budget bit, and was spent
    ledger.close()


def test_the_ledger_says_503_while_the_server_is_down_and_reconnects(postgres):
    ledger = Ledger("/nonexistent", BudgetsConfig(), state=StateConfig(url=postgres.url))
    ledger.record("outage", "k", "answered", prompt=5)
    postgres.stop("immediate")
    try:
        with pytest.raises(StateUnavailableError) as caught:
            ledger.record("outage", "k", "answered", prompt=7)
        assert caught.value.status == 503 and "127.0.0.1" in caught.value.message
    finally:
        postgres.start()
    ledger.record("outage", "k", "answered", prompt=11)
    (row,) = ledger.usage("outage")
    assert (row.requests, row.prompt_tokens) == (2, 16)  # the refused write left nothing
    ledger.close()


def test_a_ledger_written_before_migrations_is_adopted(tmp_path):
    old = sqlite3.connect(tmp_path / "usage.sqlite")
    old.executescript(
        "CREATE TABLE windows (subject TEXT NOT NULL, window TEXT NOT NULL, "
        "start INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (subject, window, start));"
        "CREATE TABLE requests (ts REAL NOT NULL, tenant TEXT NOT NULL, key_id TEXT NOT NULL, "
        "outcome TEXT NOT NULL, reason TEXT, prompt INTEGER NOT NULL DEFAULT 0, "
        "cached INTEGER NOT NULL DEFAULT 0, completion INTEGER NOT NULL DEFAULT 0, "
        "cost REAL NOT NULL DEFAULT 0);"
        f"INSERT INTO requests VALUES ({NOW}, 'acme', 'k', 'answered', NULL, 40, 0, 2, 0);"
        f"INSERT INTO windows VALUES ('tenant:acme', 'minute', {int(NOW // 60 * 60)}, 42);"
    )
    old.commit()
    old.close()
    budgets = BudgetsConfig(tenants={"acme": Budget(tokens_per_minute=100)})
    ledger = Ledger(tmp_path, budgets, clock=lambda: NOW)
    (row,) = ledger.usage("acme")
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (1, 40, 2)
    with pytest.raises(RateLimitError):
        ledger.reserve("acme", "k", Budget(), 59)  # 42 already used of 100
    ledger.settle(ledger.reserve("acme", "k", Budget(), 58), 58)
    assert ledger.used("tenant:acme", "minute") == 100
    ledger.close()
