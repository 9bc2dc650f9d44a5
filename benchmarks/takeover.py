"""How long a new node takes to own a tenant of 1,000 documents, by the tenant's history: with
snapshots (serve/state/shard_snapshots.py: the snapshot plus the log after it) and with the
log kept whole (``state.snapshot_every`` beyond the history: every upload ever made replayed,
as before snapshots). Several-node mode on a real PostgreSQL; the ShardHost of a Shards
replica, without Ray, with the hashing embedder (retrieval quality does not matter here).

    .venv/bin/python -m benchmarks.takeover [--documents 1000] [--histories 1000,10000]
        [--url postgresql://...]

Each history uploads the tenant's documents again and again (each time changed) until it
has seen that many uploads; node "a" does it, stops (its leases given back), and node "b", an
empty folder, answers the tenant's first request: the time reported.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from index.access import OPERATOR
from index.config import IndexConfig
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.shards.host import ShardHost
from serve.state.database import StateConfig
from serve.state.shard_owners import ShardOwners
from serve.state.shard_snapshots import ShardSnapshots
from serve.testing import FixedPlacement

WORDS = ["leave", "travel", "expense", "policy", "approval", "manager", "budget", "claim",
         "receipt", "hotel"]  # fmt: skip


def text(doc: int, version: int) -> bytes:
    words = " ".join(WORDS[(doc + version + i) % len(WORDS)] for i in range(40))
    return f"Document {doc}, version {version}. {words}.".encode()


async def run(url: str, documents: int, history: int, every: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="grounded-takeover-"))
    config = load_config(None, data_dir=str(folder), state={"url": url, "snapshot_every": every})
    start = lambda root: IndexService(IndexConfig(), root, embedder=HashingEmbedder()).start()  # noqa: E731
    tenant = f"t{history}-{every}-{time.time_ns()}"
    a = ShardHost(config, start, FixedPlacement("a"))
    started = time.perf_counter()
    for n in range(history):
        doc = n % documents
        await a.upload(tenant, OPERATOR, f"doc{doc}.txt", text(doc, n // documents), 60)
    uploading = time.perf_counter() - started
    while a.snapshots.taking:
        await asyncio.wait(list(a.snapshots.taking.values()))
    a.close()
    a.service.close()
    owners = ShardOwners(StateConfig(url=url))
    snapshots = ShardSnapshots(owners)
    state = snapshots.state(tenant)
    snapshots.close()
    owners.close()
    b = ShardHost(config, start, FixedPlacement("b"))
    started = time.perf_counter()
    files = await b.files(tenant, OPERATOR)
    took = time.perf_counter() - started
    assert len(files) == documents, len(files)
    b.close()
    b.service.close()
    return {"history": history, "snapshots": every < 10**9, "took_s": took,
            "log_entries": state.entries, "log_mb": state.bytes / 1e6,
            "snapshot_mb": (state.snapshot.bytes / 1e6) if state.snapshot else 0.0,
            "uploading_s": uploading}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--histories", default="1000,10000")
    parser.add_argument("--url", help="postgresql://... (default: a throwaway local server)")
    args = parser.parse_args()
    server = None
    if args.url is None:
        from tests.postgres import PostgresServer

        server = PostgresServer().start()
    url = args.url or server.url
    every = StateConfig().snapshot_every
    print("| uploads seen | snapshots | takeover s | log entries replayed | log MB | snapshot MB "
          "| history uploaded in s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    try:
        for history in (int(h) for h in args.histories.split(",")):
            for snapshot_every in (every, 10**9):
                r = asyncio.run(run(url, args.documents, history, snapshot_every))
                print(f"| {r['history']:,} | {'every ' + str(every) if r['snapshots'] else 'none'}"
                      f" | {r['took_s']:.2f} | {r['log_entries']:,} | {r['log_mb']:.2f} | "
                      f"{r['snapshot_mb']:.2f} | {r['uploading_s']:.0f} |", flush=True)  # fmt: skip
    finally:
        if server is not None:
            server.remove()


if __name__ == "__main__":
    main()
