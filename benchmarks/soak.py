"""Soak: the appliance under steady mixed traffic for a while; does anything grow or fail?

    .venv/bin/python -m benchmarks.soak [--minutes 30] [--clients 8] [--max-requests N]

Starts the appliance (configs/cpu.yaml's resources, a temporary data directory, loopback only),
uploads each sample corpus into its tenant (acme, globex), then runs ``--clients`` concurrent
clients, half per tenant, each looping over a mix of what users do: chat (streamed and not),
embeddings, vector-store search, listing files, and an upload followed by its deletion, until
``--minutes`` or ``--max-requests``. Every ``--sample-s`` seconds it records the resident
memory of every process of the appliance (by kind: Ray names its replicas' workers), the open
budget leases, and per-interval requests, errors and latency. Reported: memory per process
kind after warm-up and at the end, errors by status (a 5xx is a failure), latency per
interval, open leases after the traffic stopped, and the usage ledger against the sum of the
usage the responses reported, per tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private, local benchmark cluster

from benchmarks.prefix_cache import QUESTIONS
from serve.config import load_config

ROOT = Path(__file__).resolve().parent.parent


def memory_by_kind() -> dict[str, float]:
    """Resident MiB of the appliance's processes, summed per kind (Ray names its workers
    ``ray::ServeReplica:grounded:Generator`` and so on)."""
    import psutil

    kinds: dict[str, float] = collections.defaultdict(float)
    for process in psutil.Process().children(recursive=True):
        try:
            name = " ".join(process.cmdline()[:1]) or process.name()
            rss = process.memory_info().rss / 2**20
        except psutil.Error:
            continue
        kind = name.split(":")[-1] if "ServeReplica" in name else process.name()
        kinds[kind.split(".")[0][:40]] += rss  # a worker's title also names its current method
    return dict(kinds)


def open_leases(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "usage.sqlite") as db:
        return db.execute("SELECT count(*) FROM leases").fetchone()[0]


async def soak(config, minutes: float, clients: int, sample_s: float, max_requests: int) -> None:
    import openai

    from serve.accounting.budgets import Ledger
    from serve.identity.keys import KeyStore
    from serve.ops import up

    running = up.start(config, dashboard=False)
    try:
        tenants = ("acme", "globex")
        keys = KeyStore(config.data_dir)
        clients_by_tenant = {
            tenant: openai.AsyncOpenAI(base_url=running.api_url, timeout=600, max_retries=0,
                                       api_key=keys.create(tenant, name="soak")[1])
            for tenant in tenants
        }  # fmt: skip
        corpora = {t: sorted((ROOT / "samples" / "corpus" / t).iterdir()) for t in tenants}
        for tenant, client in clients_by_tenant.items():
            for path in corpora[tenant]:
                await client.files.create(file=(path.name, path.read_bytes()),
                                          purpose="assistants")  # fmt: skip
        reported = {t: collections.Counter() for t in tenants}  # usage the responses reported
        question = lambda: [{"role": "user", "content": random.choice(QUESTIONS)}]  # noqa: E731

        async def chat(tenant, client):
            done = await client.chat.completions.create(model="grounded", messages=question(),
                                                        max_tokens=48)  # fmt: skip
            reported[tenant]["prompt"] += done.usage.prompt_tokens
            reported[tenant]["completion"] += done.usage.completion_tokens

        async def stream(tenant, client):
            async for chunk in await client.chat.completions.create(
                model="grounded", messages=question(), max_tokens=48, stream=True,
                stream_options={"include_usage": True},
            ):  # fmt: skip
                if chunk.usage:
                    reported[tenant]["prompt"] += chunk.usage.prompt_tokens
                    reported[tenant]["completion"] += chunk.usage.completion_tokens

        async def embed(tenant, client):
            done = await client.embeddings.create(model="grounded",
                                                  input=[random.choice(QUESTIONS)])  # fmt: skip
            reported[tenant]["prompt"] += done.usage.prompt_tokens

        async def search(tenant, client):
            await client.vector_stores.search(f"vs_{tenant}", query=random.choice(QUESTIONS))

        async def files(tenant, client):
            await client.files.list()

        async def churn(tenant, client):
            path = random.choice(corpora[tenant])
            name = f"soak-{random.randrange(10**6)}-{path.name}"
            created = await client.files.create(file=(name, path.read_bytes()),
                                                purpose="assistants")  # fmt: skip
            await client.files.delete(created.id)

        mix = [chat, chat, stream, stream, embed, search, files, churn]
        intervals: list[dict] = []
        current = {"latency": [], "errors": collections.Counter(), "by": collections.Counter()}
        deadline = time.monotonic() + 60 * minutes
        budget = [max_requests]

        def going() -> bool:
            return time.monotonic() < deadline and budget[0] > 0

        async def worker(tenant: str):
            client = clients_by_tenant[tenant]
            while going():
                budget[0] -= 1
                action = random.choice(mix)
                started = time.perf_counter()
                try:
                    await action(tenant, client)
                    current["latency"].append(time.perf_counter() - started)
                except openai.APIStatusError as exc:
                    current["errors"][str(exc.status_code)] += 1
                except openai.APIError as exc:
                    current["errors"][type(exc).__name__] += 1
                current["by"][action.__name__] += 1

        async def sampler():
            nonlocal current
            started = time.monotonic()
            while going():
                await asyncio.sleep(sample_s)
                done, current = current, {"latency": [], "errors": collections.Counter(),
                                          "by": collections.Counter()}  # fmt: skip
                lat = sorted(done["latency"]) or [0.0]
                intervals.append({
                    "t": round(time.monotonic() - started), "requests": sum(done["by"].values()),
                    "errors": dict(done["errors"]), "p50": statistics.median(lat),
                    "p95": lat[int(0.95 * (len(lat) - 1))], "memory": memory_by_kind(),
                    "leases": open_leases(config.data_dir),
                })  # fmt: skip
                row = intervals[-1]
                print(
                    f"t={row['t']}s requests={row['requests']} errors={row['errors']} "
                    f"p50={row['p50']:.2f}s p95={row['p95']:.2f}s leases={row['leases']} "
                    f"rss={sum(row['memory'].values()):.0f} MiB",
                    file=sys.stderr,
                    flush=True,
                )

        before = memory_by_kind()
        workers = [worker(tenants[i % len(tenants)]) for i in range(clients)]
        await asyncio.gather(sampler(), *workers)
        await asyncio.sleep(2)
        report(before, intervals, open_leases(config.data_dir), minutes, clients)
        ledger = Ledger(config.data_dir, config.budgets)
        print("\n| tenant | prompt tokens (ledger / responses) | completion tokens (ledger / "
              "responses) |\n|---|---|---|")  # fmt: skip
        for tenant in tenants:
            rows = ledger.usage(tenant)
            prompt = sum(r.prompt_tokens for r in rows)
            completion = sum(r.completion_tokens for r in rows)
            print(f"| {tenant} | {prompt} / {reported[tenant]['prompt']} | {completion} / "
                  f"{reported[tenant]['completion']} |")  # fmt: skip
    finally:
        running.stop()


def report(before, intervals, leases_after, minutes, clients) -> None:
    print(f"## Soak: {minutes} min, {clients} clients ({platform.machine()}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')})\n")  # fmt: skip
    print("| interval end (s) | requests | errors | p50 (s) | p95 (s) | open leases | RSS (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for row in intervals:
        print(
            f"| {row['t']} | {row['requests']} | {row['errors'] or 0} | {row['p50']:.2f} | "
            f"{row['p95']:.2f} | {row['leases']} | {sum(row['memory'].values()):.0f} |"
        )
    if intervals:
        first, last = intervals[0]["memory"], intervals[-1]["memory"]
        print("\n| process | RSS after warm-up (MiB) | RSS at the end (MiB) | growth |")
        print("|---|---|---|---|")
        for kind in sorted(set(first) | set(last)):
            a, b = first.get(kind, 0.0), last.get(kind, 0.0)
            print(f"| {kind} | {a:.0f} | {b:.0f} | {b - a:+.0f} |")
    total_before = sum(before.values())
    print(f"\nRSS before traffic {total_before:.0f} MiB; budget leases open after the traffic "
          f"stopped: {leases_after}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--sample-s", type=float, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grounded-soak-") as tmp:
        config = load_config(Path(args.config), data_dir=Path(tmp) / "data")
        (Path(tmp) / "data").mkdir()
        (Path(tmp) / "data" / "models").symlink_to(ROOT / "data" / "models")
        asyncio.run(soak(config, args.minutes, args.clients, args.sample_s, args.max_requests))


if __name__ == "__main__":
    main()
