"""Change to answer (issue 66): how long after a change at a source the appliance answers from
it (an edit) or no longer does (a delete), with the appliance's own scheduler
(serve/shards/sources.py ``watch``) running a 1,000-file folder every minute, the default
embedder (all-MiniLM-L6-v2) embedding the changes. A change is made at a random moment; a
search for its marker word (lexical, as the tenant's admin) is polled every 0.25 s until the
change shows. The bound to hold: the interval, plus the scheduler's poll, plus a run's time.

    .venv/bin/python -m benchmarks.source_lag [--files 1000] [--changes 40] [--every 1m]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from index.access import Reader
from index.config import IndexConfig
from index.service import IndexService
from index.sources import state
from serve.config import load_config
from serve.identity.audit import AuditLog
from serve.query.retrieval import SearchFilter, SearchParams, search_shard
from serve.shards.host import ShardHost

ADMIN = Reader("key:bench", admin=True)
TENANT = "bench"


def make_folder(root: Path, files: int) -> list[Path]:
    paths = []
    for n in range(files):
        path = root / f"d{n // 100:02}" / f"note{n:04}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {n}\n\nTeam note number {n} about leave and travel. Tag{n}.\n")
        paths.append(path)
    return paths


async def shows(host: ShardHost, marker: str) -> bool:
    shard = await host.shard(TENANT)
    params = SearchParams(mode="lexical", search_filter=SearchFilter(readable_by=ADMIN))
    return bool(await asyncio.to_thread(search_shard, shard, None, marker, 1, params))


async def change(host: ShardHost, path: Path, n: int, marker: str, at: float) -> float:
    """At ``at`` s from now: an edit (a new marker in the file) or a delete (of the file and
    its marker Tag<n>); seconds from the change to the search showing it."""
    await asyncio.sleep(at)
    delete = n % 2 == 1
    if delete:
        path.unlink()
        marker = f"Tag{int(path.stem.removeprefix('note'))}"
    else:
        path.write_text(f"# Edited\n\nThe note now reads {marker}.\n")
    began = time.monotonic()
    while await shows(host, marker) == delete:
        await asyncio.sleep(0.25)
    return time.monotonic() - began


async def measure(files: int, changes: int, every: str, window: float, seed: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="grounded-lag-"))
    paths = make_folder(root / "share", files)
    declared = {"name": "docs", "source": f"folder:{root / 'share'}", "every": every}
    config = load_config(None, data_dir=str(root / "data"),
                         sources={"declared": {TENANT: [declared]}})  # fmt: skip
    service = IndexService(IndexConfig(), root / "data").start()
    service.shard(TENANT, create=True)
    host = ShardHost(config, lambda _: service)
    started = time.monotonic()
    await host.sources.declare_configured()
    watcher = asyncio.create_task(host.sources.watch())
    while (await asyncio.to_thread(state.get, await host.shard(TENANT), "docs")).last_run is None:
        await asyncio.sleep(0.5)
    print(f"first run: {files} files in {time.monotonic() - started:.1f} s")
    rng = random.Random(seed)
    chosen = rng.sample(paths, changes)  # each change at its own moment in the window
    lags = await asyncio.gather(*(
        change(host, path, n, f"Marker{seed}x{n}", rng.uniform(0, window))
        for n, path in enumerate(chosen)
    ))  # fmt: skip
    watcher.cancel()
    lags = {"edit": lags[0::2], "delete": lags[1::2]}
    audit = AuditLog(root / "data", config.audit)  # each run's report, the first one aside
    reports = [e["question"].split(": ", 1)[1] for e in audit.entries(tenant=TENANT)]
    runs = [json.loads(r)["seconds"] for r in reports[1:]]
    every_s = state.parse_every(every)
    bound = every_s + config.sources.poll_s + max(runs)
    print(f"\n{files} files, every {every}, poll {config.sources.poll_s:g} s; bound "
          f"interval + poll + slowest run = {bound:.1f} s\n\n| change | n | p50 s | p95 s | "
          "max s |\n|---|---|---|---|---|")  # fmt: skip
    for kind, values in (*lags.items(), ("all", lags["edit"] + lags["delete"])):
        p95 = statistics.quantiles(values, n=20, method="inclusive")[-1]
        print(f"| {kind} | {len(values)} | {statistics.median(values):.1f} | {p95:.1f} | "
              f"{max(values):.1f} |")  # fmt: skip
    print(f"\n{len(runs)} runs: median {statistics.median(runs):.2f} s, slowest {max(runs):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--every", default="1m")
    parser.add_argument("--window", type=float, default=240.0, help="Seconds the changes span.")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(measure(args.files, args.changes, args.every, args.window, args.seed))


if __name__ == "__main__":
    main()
