"""The randomized fault run of issue 65 (tests/nemesis.py): three replicas over one real
PostgreSQL, clients uploading, changing access lists, deleting and reading through the HTTP
API while a nemesis freezes replicas' links to PostgreSQL and pauses replicas; then the
checks (the owner's state allowed by each file's history, a fresh replay equal to it, no read
of a revoked file). Prints the history's size, the faults and the checks.

    .venv/bin/python -m benchmarks.nemesis [--minutes 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests.nemesis import run
from tests.postgres import PostgresServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=6)
    args = parser.parse_args()
    server = PostgresServer().start()
    try:
        report = run(server, Path(tempfile.mkdtemp(prefix="grounded-nemesis-")),
                     args.minutes * 60, args.seed, args.clients)  # fmt: skip
    finally:
        server.remove()
    total = sum(sum(c.values()) for c in report.ops.values())
    print(f"{args.minutes:g} min, seed {args.seed}: {total} operations {report.ops}")
    print(f"faults {report.faults}; the tenant changed owner {report.owner_changes} times; "
          f"{report.files} files written")  # fmt: skip
    print(f"owner's state allowed by every file's history: {not report.disallowed} "
          f"{report.disallowed[:5]}")  # fmt: skip
    print(f"fresh replay equal to the owner's state: {not report.replay_differs} "
          f"{dict(list(report.replay_differs.items())[:5])}")  # fmt: skip
    print(
        f"reads after an acknowledged revocation that returned the file: "
        f"{len(report.stale_reads)} of {report.reads_checked} reads {report.stale_reads[:5]}"
    )
    print("PASSED" if report.passed else "FAILED")


if __name__ == "__main__":
    main()
