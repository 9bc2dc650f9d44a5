"""Fair admission: a quiet tenant's time to first token while another tenant floods the
appliance, with fair admission on (configs/cpu.yaml) and off (first come, first served), in one
run.

    .venv/bin/python -m benchmarks.fairness [--flood 16] [--quiet-requests 5] [--every 3]

For each mode the script starts the appliance (a temporary data directory, the fetched default
model), uploads the acme sample corpus to two tenants ("flood" and "quiet") through the API,
then measures with the official openai client (streaming, TTFT = first text delta):
  1. idle: the quiet tenant alone, one request at a time;
  2. flooded: the flood tenant keeps `--flood` streaming requests in flight (max_tokens
     `--flood-tokens`) while the quiet tenant sends a request `--every` seconds after its
     previous one ends.
"Off" raises serve.generation_slots above the flood (nothing queues in the ingress, nothing
is preempted) and sets vLLM's scheduling_policy to fcfs; "on" is configs/cpu.yaml as shipped
(4 slots of which 1 may process a prompt, per-tenant queues, preemption of the flood's prompt
processing, priority scheduling). Prefix caching is off in both modes (unless --prefix-caching):
the flood repeats its questions, and cached prompts would make it nearly free; the idle and the
flooded phases use two tenants with the same documents, so neither warms the other's cache.
Target: quiet TTFT when flooded <= 2x its idle TTFT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
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


async def ttft(client, question: str, max_tokens: int) -> float:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="grounded", messages=[{"role": "user", "content": question}],
        max_tokens=max_tokens, stream=True,
    )  # fmt: skip
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


async def preemptions(metrics_url: str) -> int:
    """The flood's generations restarted by fair admission (Ray exports metrics every few
    seconds, so the count is read until it stops changing)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    seen = -1
    for _ in range(6):
        await asyncio.sleep(5)
        text = httpx.get(metrics_url, timeout=10).text
        count = sum(
            int(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "ray_grounded_tenant_preemptions_total"
            and sample.labels.get("tenant") == "flood"
        )
        if count == seen:
            return count
        seen = count
    return seen


async def measure(config, args) -> dict:
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up

    running = up.start(config, dashboard=False)
    try:
        clients = {}
        for tenant in ("flood", "quiet-idle", "quiet"):
            key = KeyStore(config.data_dir).create(tenant, name="fairness")[1]
            clients[tenant] = openai.AsyncOpenAI(
                base_url=running.api_url, api_key=key, timeout=1800, max_retries=0
            )
            for path in sorted((ROOT / "samples" / "corpus" / "acme").iterdir()):
                await clients[tenant].files.create(
                    file=(path.name, path.read_bytes()), purpose="assistants"
                )
        quiet = [q for q in QUESTIONS if "remote" not in q][: args.quiet_requests]
        await ttft(clients["quiet-idle"], QUESTIONS[-1], args.quiet_tokens)  # warm-up
        idle = [await ttft(clients["quiet-idle"], q, args.quiet_tokens) for q in quiet]
        print(f"  idle: {[round(t, 2) for t in idle]}", file=sys.stderr, flush=True)

        stop = asyncio.Event()
        flood_done = 0

        async def flood_worker(offset: int) -> None:
            nonlocal flood_done
            number = offset
            while not stop.is_set():
                try:
                    await ttft(clients["flood"], QUESTIONS[number % len(QUESTIONS)],
                               args.flood_tokens)  # fmt: skip
                except openai.RateLimitError:  # a full queue or budget: back off like a client
                    await asyncio.sleep(1)
                    continue
                flood_done += 1
                number += args.flood

        flood_started = time.perf_counter()
        workers = [asyncio.create_task(flood_worker(i)) for i in range(args.flood)]
        await asyncio.sleep(args.warmup)  # let the flood fill the queues
        flooded = []
        for question in quiet:
            flooded.append(await ttft(clients["quiet"], question, args.quiet_tokens))
            print(f"  flooded: {flooded[-1]:.2f} s ({flood_done} flood requests done)",
                  file=sys.stderr, flush=True)  # fmt: skip
            await asyncio.sleep(args.every)
        stop.set()
        flood_minutes = (time.perf_counter() - flood_started) / 60
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return {"idle": idle, "flooded": flooded, "flood_rate": flood_done / flood_minutes,
                "phase_s": flood_minutes * 60,
                "preemptions": await preemptions(running.metrics_url)}  # fmt: skip
    finally:
        running.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--flood", type=int, default=16, help="flood requests in flight")
    parser.add_argument("--flood-tokens", type=int, default=32)
    parser.add_argument("--quiet-requests", type=int, default=5)
    parser.add_argument("--quiet-tokens", type=int, default=8)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between quiet requests")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of flood first")
    parser.add_argument("--modes", default="off,on")
    parser.add_argument("--prefix-caching", action="store_true")
    args = parser.parse_args()
    base = load_config(Path(args.config))
    results = {}
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "models").symlink_to((base.data_dir / "models").resolve())
            engine = {**base.generator.engine_kwargs,
                      "enable_prefix_caching": args.prefix_caching}  # fmt: skip
            serve = base.serve
            if mode == "off":
                engine["scheduling_policy"] = "fcfs"
                serve = serve.model_copy(
                    update={"generation_slots": 4 * args.flood, "prefill_slots": None}
                )
            overrides = {
                "serve": serve,
                "generator": base.generator.model_copy(update={"engine_kwargs": engine}),
            }
            config = load_config(Path(args.config), data_dir=Path(tmp), **overrides)
            print(f"fair admission {mode}", file=sys.stderr, flush=True)
            results[mode] = await measure(config, args)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; model {base.generator.model}; "
          f"flood {args.flood} in flight x {args.flood_tokens} tokens; quiet "
          f"{args.quiet_requests} requests x {args.quiet_tokens} tokens")  # fmt: skip
    print("\n| fair admission | quiet TTFT idle (median) | quiet TTFT flooded (median) | ratio | "
          "flooded TTFTs | flooded phase | flood requests per minute | flood preemptions |\n"
          "|---|---|---|---|---|---|---|---|")  # fmt: skip
    for mode, r in results.items():
        idle, flooded = statistics.median(r["idle"]), statistics.median(r["flooded"])
        print(
            f"| {mode} | {idle:.2f} s | {flooded:.2f} s | {flooded / idle:.2f}x | "
            f"{', '.join(f'{t:.1f}' for t in r['flooded'])} | {r['phase_s']:.0f} s | "
            f"{r['flood_rate']:.2f} | "
            f"{r['preemptions']} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
