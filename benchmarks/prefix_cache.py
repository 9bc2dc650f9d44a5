"""Prefix caching and pipeline overhead with the default model, side by side in one run.

    .venv/bin/python -m benchmarks.prefix_cache [--questions 8] [--config configs/cpu.yaml]

1. Prefix caching: the same shared-context workload (one tenant, questions on the same
   documents, so the retrieved sources overlap and render to the same prefix) goes to two
   engines of the same model, prefix caching on and off, alternating request by request.
   Reported: time to first token (max_tokens=1) per engine and their ratio, and the engine's
   prefix-cache hit rate (hit tokens / queried tokens).
2. Pipeline overhead: on the engine without caching (every prefill is full, so the order of
   calls cannot favour either), time to first token of QueryPipeline.stream (condense, embed,
   search, fuse, gate, budget, prompt, render, generate) against the same engine given the
   identical final token ids directly, alternating.
3. What isolating readers costs (issue 38): the cache salt is per tenant and per set of
   principals the asker reads as (serve/query/prompt.py ``cache_salt``), so users who may read
   the same documents no longer share cached prefixes. ``--users`` users of one group each ask
   every question once, in a seeded random order; each prompt goes to the caching engine twice,
   once with the tenant's salt (what every user shared before issue 38) and once with the
   user's, each salt its own namespace. Reported: hit rate and mean TTFT per salt.

    .venv/bin/python -m benchmarks.prefix_cache --part salts --users 4 --questions 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from index.access import principals_of
from index.pipeline import discover
from index.service import IndexService
from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import resolve_model
from serve.query.pipeline import Answer, QueryPipeline
from serve.query.prompt import cache_salt
from serve.query.retrieval import LocalSearcher

ROOT = Path(__file__).resolve().parent.parent

QUESTIONS = [
    "How many days of annual leave do employees get?",
    "Can unused annual leave be carried over?",
    "When must sick leave be reported?",
    "How many days per week can employees work remotely?",
    "What are the core working hours?",
    "How are hotel nights reimbursed?",
    "When do carried-over leave days expire?",
    "Is a medical certificate required for sick leave?",
    "What is the meal allowance during travel?",
    "Who approves fully remote arrangements?",
]


async def first_token(stream) -> float:
    started = time.perf_counter()
    async for _ in stream:
        return time.perf_counter() - started
    raise AssertionError("empty stream")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--part", choices=("caching", "salts", "all"), default="all")
    parser.add_argument("--users", type=int, default=4, help="readers in part 3")
    args = parser.parse_args()
    config = load_config(Path(args.config))
    questions = QUESTIONS[: args.questions]
    model = resolve_model(config.generator.model, config.data_dir)
    engines = {}
    for name, caching in (("on", True), ("off", False)):
        if name == "off" and args.part == "salts":
            continue
        kwargs = config.generator.engine_kwargs | {"enable_prefix_caching": caching}
        engines[name] = VllmGenerator(
            config.generator.model_copy(update={"model": model, "engine_kwargs": kwargs})
        ).start()
    with tempfile.TemporaryDirectory() as tmp:
        service = IndexService(config.index, Path(tmp)).start()
        files, _ = discover([ROOT / "samples" / "corpus" / "acme"])
        list(service.pipeline("acme").ingest(files))
        pipelines = {
            name: QueryPipeline(LocalSearcher(service), e, config.query)
            for name, e in engines.items()
        }
        prepared = [await pipelines["on"].prepare("acme", q, max_tokens=1) for q in questions]
        lengths = [len(p.token_ids) for p in prepared]
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; model "
              f"{config.generator.model}; {len(questions)} questions; prompt tokens "
              f"{min(lengths)}-{max(lengths)}")  # fmt: skip
        if args.part != "salts":
            await caching_and_overhead(engines, pipelines["off"], questions, prepared)
        if args.part != "caching":
            await salt_cost(engines["on"], prepared, args.users)
        service.close()
    for engine in engines.values():
        engine.shutdown()


async def caching_and_overhead(engines, pipeline_off, questions, prepared) -> None:
    ttft: dict[str, list[float]] = {"on": [], "off": []}
    for prompt in prepared:  # alternate engines request by request
        for name, engine in engines.items():
            stream = engine.stream(prompt.token_ids, max_tokens=1, cache_salt=prompt.cache_salt)
            ttft[name].append(await first_token(stream))
    stats = engines["on"].stats()
    overhead: dict[str, list[float]] = {"pipeline": [], "engine": []}
    off = engines["off"]
    for question, prompt in zip(questions, prepared, strict=True):
        stream = pipeline_off.stream("acme", question, max_tokens=1)
        overhead["pipeline"].append(await first_token(_text_only(stream)))
        stream = off.stream(prompt.token_ids, max_tokens=1, cache_salt=prompt.cache_salt)
        overhead["engine"].append(await first_token(stream))

    mean = statistics.fmean
    print("\n| prefix caching | mean TTFT s (all) | mean TTFT s (after the first) |")
    print("|---|---|---|")
    for name in ("off", "on"):
        print(f"| {name} | {mean(ttft[name]):.3f} | {mean(ttft[name][1:]):.3f} |")
    ratio = mean(ttft["on"][1:]) / mean(ttft["off"][1:])
    print(f"| ratio on/off | {mean(ttft['on']) / mean(ttft['off']):.2f} | {ratio:.2f} |")
    print(f"\nprefix-cache hit rate (engine counters): {stats.prefix_cache_hit_rate:.2f} "
          f"({stats.prefix_cache_hits} of {stats.prefix_cache_queries} prompt tokens)")  # fmt: skip
    print("\n| path (caching off) | mean TTFT s | median TTFT s |")
    print("|---|---|---|")
    for name, values in overhead.items():
        print(f"| {name} | {mean(values):.3f} | {statistics.median(values):.3f} |")
    added = mean(overhead["pipeline"]) / mean(overhead["engine"]) - 1
    print(f"| pipeline overhead | {added:+.1%} | |")


async def salt_cost(engine, prepared, users: int) -> None:
    """Part 3: the same asks under the tenant's salt and under each reader's."""
    readers = [principals_of(f"user{n}@example.com", ["staff"]) for n in range(users)]
    asks = [(r, p) for r in readers for p in prepared]
    random.Random(7).shuffle(asks)
    salts = {  # a run-unique tenant name: neither namespace holds blocks of part 1
        "tenant": lambda _: cache_salt("salt-run-tenant"),
        "reader": lambda r: cache_salt("salt-run-reader", r),
    }
    hits = {name: [0, 0] for name in salts}
    ttft: dict[str, list[float]] = {name: [] for name in salts}
    for reader, prompt in asks:  # alternate request by request
        for name, salt in salts.items():
            before = engine.stats()
            stream = engine.stream(prompt.token_ids, max_tokens=1, cache_salt=salt(reader))
            ttft[name].append(await first_token(stream))
            await asyncio.sleep(0.2)  # the step's stats reach the recorder
            after = engine.stats()
            hits[name][0] += after.prefix_cache_hits - before.prefix_cache_hits
            hits[name][1] += after.prefix_cache_queries - before.prefix_cache_queries
    print(f"\n{users} readers of one group x {len(prepared)} questions, seeded random order")
    print("\n| cache salt | prefix-cache hit rate | hit / queried tokens | mean TTFT s |")
    print("|---|---|---|---|")
    for name in salts:
        found, queried = hits[name]
        rate = found / queried if queried else 0.0
        print(f"| {name} | {rate:.2f} | {found} / {queried} | {statistics.fmean(ttft[name]):.3f} |")
    ratio = statistics.fmean(ttft["reader"]) / statistics.fmean(ttft["tenant"])
    print(f"| ratio reader/tenant | | | {ratio:.2f} |")


async def _text_only(stream):
    async for item in stream:
        if not isinstance(item, Answer):
            yield item


if __name__ == "__main__":
    asyncio.run(main())
