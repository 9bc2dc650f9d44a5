"""The state an answered request writes, per request: a budget reservation and its settling,
the usage record, an audit entry and a stored response (serve/accounting/budgets.py,
serve/identity/audit.py,
serve/state/response_store.py), one request after another, in SQLite files (one node) or on a
PostgreSQL server (several nodes, ``--url``).

    .venv/bin/python -m benchmarks.state_writes [--requests 300] [--rounds 3] [--url URL]

It uses only the stores' constructors of before the state interface (serve/state/database.py), so
the same file runs on an older checkout (a `git worktree`) for a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from serve.accounting.budgets import Budget, BudgetsConfig, Ledger
from serve.identity.audit import AuditConfig, AuditEntry, AuditLog
from serve.state.response_store import ResponseStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help="postgresql://... (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    folder, budgets = tempfile.mkdtemp(), BudgetsConfig(default=Budget(max_concurrent=100))
    if args.url:
        from serve.state.database import StateConfig

        state = StateConfig(url=args.url)
        ledger = Ledger(folder, budgets, state=state)
        audit, responses = (
            AuditLog(folder, AuditConfig(), state=state),
            ResponseStore(folder, state),
        )
    else:
        ledger, audit, responses = (
            Ledger(folder, budgets),
            AuditLog(folder, AuditConfig()),
            ResponseStore(folder),
        )
    for _ in range(args.rounds):
        started = time.perf_counter()
        for n in range(args.requests):
            lease = ledger.reserve("acme", "key", Budget(), 500)
            ledger.settle(lease, 300)
            ledger.record("acme", "key", "answered", prompt=250, completion=50)
            audit.append(
                AuditEntry("acme", "key:key", "key", (), "chat", "Leave?", ("d1",), ("d1",), False)
            )
            responses.save("acme", {"id": f"resp_{time.time_ns()}_{n}", "created_at": 1}, [], [])
        seconds = time.perf_counter() - started
        print(
            f"{'PostgreSQL' if args.url else 'SQLite'}: {seconds / args.requests * 1000:.2f} ms "
            f"per request ({args.requests} requests)"
        )


if __name__ == "__main__":
    main()
