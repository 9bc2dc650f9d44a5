"""Load on the appliance through the official openai client against the bare vLLM engine with
the same final prompts, in one run: a concurrency sweep.

    .venv/bin/python -m benchmarks.load [--concurrency 1,4,16] [--max-tokens 16]

Phase 1 starts the appliance (configs/cpu.yaml resources, a temporary data directory), uploads
the acme sample corpus through the API and sends streaming chat completions at each
concurrency (each level sends `--waves` x concurrency requests, questions in rotation).
Phase 2 stops it, starts the same model as a bare vLLM AsyncLLM in this process, and sends the
identical token ids the pipeline built for each question (same max_tokens, same cache salt,
same structured-output schema for quoted answers), at most `serve.generation_slots` at once
as the appliance admits them: equal work on both sides. TTFT is the first text delta on the
appliance and the first token on the bare engine, so compare it with prose answers
(GROUNDED_QUERY__ANSWER_FORMAT=prose): a quoted answer's text starts after its quote.
Reported per level and path: requests/s, p50/p95 latency, p50 time to first token, and the
prefix-cache hit rate (cached / prompt tokens of the responses); then the ratios.
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


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(share * len(ordered) + 0.5) - 1)]


def summarize(rows: list[tuple[float, float, int, int]], elapsed: float) -> dict[str, float]:
    latencies = [r[0] for r in rows]
    ttfts = [r[1] for r in rows]
    prompt, cached = sum(r[2] for r in rows), sum(r[3] for r in rows)
    return {
        "rps": len(rows) / elapsed,
        "p50": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
        "ttft": statistics.median(ttfts),
        "hit": cached / prompt if prompt else 0.0,
    }


async def sweep(send, questions, levels: list[int], waves: int) -> dict[int, dict[str, float]]:
    results = {}
    for level in levels:
        count = level * waves
        queue = list(range(count))
        rows: list[tuple[float, float, int, int]] = []

        async def worker(queue=queue, rows=rows):
            while queue:
                number = queue.pop()
                rows.append(await send(questions[number % len(questions)]))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(level)))
        results[level] = summarize(rows, time.perf_counter() - started)
        print(f"  concurrency {level}: {results[level]}", file=sys.stderr, flush=True)
    return results


async def appliance_phase(config, questions, levels, waves, max_tokens):
    import openai

    from serve.identity.keys import KeyStore
    from serve.ops import up

    running = up.start(config, dashboard=False)
    try:
        key = KeyStore(config.data_dir).create("acme", name="load")[1]
        client = openai.AsyncOpenAI(base_url=running.api_url, api_key=key, timeout=900,
                                    max_retries=0)  # fmt: skip
        for path in sorted((ROOT / "samples" / "corpus" / "acme").iterdir()):
            await client.files.create(file=(path.name, path.read_bytes()), purpose="assistants")

        async def send(question: str):
            started = time.perf_counter()
            first = None
            usage = None
            stream = await client.chat.completions.create(
                model="grounded", messages=[{"role": "user", "content": question}],
                max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
            )  # fmt: skip
            async for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - started
                if chunk.usage:
                    usage = chunk.usage
            total = time.perf_counter() - started
            cached = usage.prompt_tokens_details.cached_tokens if usage else 0
            return total, first or total, usage.prompt_tokens if usage else 0, cached

        await send(questions[0])  # warm-up
        return await sweep(send, questions, levels, waves)
    finally:
        running.stop()


def prompts_for(config, max_tokens):
    """The final token ids the pipeline builds for each question that gets sources (a question
    the evidence gate turns away would not reach the generator in either phase)."""
    from index.pipeline import discover
    from index.service import IndexService
    from serve.engine.models import resolve_model
    from serve.query.generation import ChatTokenizer
    from serve.query.pipeline import QueryPipeline
    from serve.query.retrieval import LocalSearcher

    model = resolve_model(config.generator.model, config.data_dir)
    service = IndexService(config.index, config.data_dir / "bare").start()
    files, _ = discover([ROOT / "samples" / "corpus" / "acme"])
    list(service.pipeline("acme").ingest(files))

    class TokenizerOnly(ChatTokenizer):
        max_model_len = config.generator.max_model_len

    builder = QueryPipeline(LocalSearcher(service), TokenizerOnly.from_folder(model), config.query)

    async def build():
        return {q: await builder.prepare("acme", q, max_tokens=max_tokens) for q in QUESTIONS}

    prompts = asyncio.run(build())
    service.close()
    return {q: p for q, p in prompts.items() if p is not None}


async def bare_phase(config, prompts, levels, waves, max_tokens):
    from serve.engine.generator import VllmGenerator
    from serve.engine.models import resolve_model

    model = resolve_model(config.generator.model, config.data_dir)
    engine = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    # Equal work: the appliance admits at most serve.generation_slots generations at once
    # (fair admission); the bare engine gets the same cap, or it would batch more.
    slots = asyncio.Semaphore(config.serve.generation_slots)
    try:

        async def send(question: str):
            prepared = prompts[question]
            started = time.perf_counter()
            first, last = None, None
            async with slots:
                async for chunk in engine.stream(prepared.token_ids, max_tokens=max_tokens,
                                                 cache_salt=prepared.cache_salt,
                                                 json_schema=prepared.json_schema):  # fmt: skip
                    first = first or time.perf_counter() - started
                    last = chunk
            return time.perf_counter() - started, first, last.prompt_tokens, last.cached_tokens

        questions = list(prompts)
        await send(questions[0])
        return await sweep(send, questions, levels, waves)
    finally:
        engine.shutdown()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "configs" / "cpu.yaml"))
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    base = load_config(Path(args.config))
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.symlink_to((base.data_dir / "models").resolve())  # reuse the fetched model
        config = load_config(Path(args.config), data_dir=Path(tmp))
        prompts = await asyncio.to_thread(prompts_for, config, args.max_tokens)
        print(f"{len(prompts)} of {len(QUESTIONS)} questions get sources", file=sys.stderr)
        print("phase 1: the appliance", file=sys.stderr)
        served = await appliance_phase(config, list(prompts), levels, args.waves, args.max_tokens)
        print("phase 2: bare vLLM", file=sys.stderr)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # as in the generator replica
        bare = await bare_phase(config, prompts, levels, args.waves, args.max_tokens)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; model {base.generator.model}; "
          f"max_tokens {args.max_tokens}; {args.waves} waves per level")  # fmt: skip
    print("\n| concurrency | path | req/s | p50 latency s | p95 latency s | p50 TTFT s | "
          "prefix-cache hit rate |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for level in levels:
        for name, result in (("Grounded (HTTP, openai client)", served[level]),
                             ("bare vLLM AsyncLLM", bare[level])):  # fmt: skip
            r = result
            print(f"| {level} | {name} | {r['rps']:.2f} | {r['p50']:.2f} | {r['p95']:.2f} | "
                  f"{r['ttft']:.2f} | {r['hit']:.2f} |")  # fmt: skip
    print("\n| concurrency | throughput Grounded / bare | p50 TTFT overhead |\n|---|---|---|")
    for level in levels:
        ratio = served[level]["rps"] / bare[level]["rps"]
        overhead = served[level]["ttft"] / bare[level]["ttft"] - 1
        print(f"| {level} | {ratio:.2f} | {overhead:+.0%} |")


if __name__ == "__main__":
    asyncio.run(main())
