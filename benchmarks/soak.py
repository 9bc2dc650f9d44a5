"""Soak: the appliance under steady mixed traffic for a while; does anything grow or fail?

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--clients 4] [--config configs/cpu.yaml]

Starts the appliance (the config's resources, a temporary data directory), uploads the acme
sample corpus, then runs ``--clients`` concurrent clients, each looping over a mix of what
users do: chat (streamed and not), embeddings, vector-store search, listing files, and an
upload followed by its deletion. Every ``--sample-s`` seconds it records the resident memory
of every process of the appliance (this process's children and Ray's workers, by name),
the open budget leases, and per-interval request counts, errors and latency. Reported: the
first and last samples side by side (memory growth per process kind), errors by status,
latency p50/p95 per interval, and whether any lease stayed open after the traffic stopped.
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
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.prefix_cache import QUESTIONS  # noqa: E402
from serve.config import load_config  # noqa: E402


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
        kinds[kind[:40]] += rss
    return dict(kinds)


def open_leases(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "usage.sqlite") as db:
        return db.execute("SELECT count(*) FROM leases").fetchone()[0]


async def soak(config, minutes: float, clients: int, sample_s: float) -> None:
    import openai

    from serve import up
    from serve.keys import KeyStore

    running = up.start(config, dashboard=False)
    try:
        key = KeyStore(config.data_dir).create("acme", name="soak")[1]
        client = openai.AsyncOpenAI(base_url=running.api_url, api_key=key, timeout=600,
                                    max_retries=0)  # fmt: skip
        corpus = sorted((ROOT / "samples" / "corpus" / "acme").iterdir())
        for path in corpus:
            await client.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        question = lambda: [{"role": "user", "content": random.choice(QUESTIONS)}]  # noqa: E731

        async def chat():
            await client.chat.completions.create(model="grounded", messages=question(),
                                                 max_tokens=48)  # fmt: skip

        async def stream():
            async for _ in await client.chat.completions.create(
                model="grounded", messages=question(), max_tokens=48, stream=True
            ):
                pass

        async def embed():
            await client.embeddings.create(model="grounded", input=[random.choice(QUESTIONS)])

        async def search():
            await client.vector_stores.search("vs_acme", query=random.choice(QUESTIONS))

        async def files():
            await client.files.list()

        async def churn():
            path = random.choice(corpus)
            name = f"soak-{random.randrange(10**6)}-{path.name}"
            created = await client.files.create(file=(name, path.read_bytes()),
                                                purpose="assistants")  # fmt: skip
            await client.files.delete(created.id)

        mix = [chat, chat, stream, stream, embed, search, files, churn]
        intervals: list[dict] = []
        current = {"latency": [], "errors": collections.Counter(), "by": collections.Counter()}
        deadline = time.monotonic() + 60 * minutes

        async def worker():
            while time.monotonic() < deadline:
                action = random.choice(mix)
                started = time.perf_counter()
                try:
                    await action()
                    current["latency"].append(time.perf_counter() - started)
                except openai.APIStatusError as exc:
                    current["errors"][str(exc.status_code)] += 1
                except openai.APIError as exc:
                    current["errors"][type(exc).__name__] += 1
                current["by"][action.__name__] += 1

        async def sampler():
            nonlocal current
            started = time.monotonic()
            while time.monotonic() < deadline:
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
        await asyncio.gather(sampler(), *(worker() for _ in range(clients)))
        await asyncio.sleep(2)
        report(before, intervals, open_leases(config.data_dir), minutes, clients)
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
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grounded-soak-") as tmp:
        config = load_config(Path(args.config), data_dir=Path(tmp) / "data")
        (Path(tmp) / "data").mkdir()
        (Path(tmp) / "data" / "models").symlink_to(ROOT / "data" / "models")
        asyncio.run(soak(config, args.minutes, args.clients, args.sample_s))


if __name__ == "__main__":
    main()
