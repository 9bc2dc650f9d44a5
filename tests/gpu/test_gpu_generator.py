"""The CUDA vLLM engine with configs/gpu.yaml's own engine settings (the tiny local model in
place of the 7B one, so that nothing is downloaded), and gpu.yaml against this machine's GPUs."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from serve.config import load_config
from serve.deployments.resources import engine_kwargs, gpu_packing
from serve.engine.generator import VllmGenerator
from serve.query.prompt import cache_salt
from tests.conftest import CORPUS, REPO
from tests.tiny_model import build_tiny_model

pytestmark = pytest.mark.gpu

GPU_YAML = REPO / "configs" / "gpu.yaml"


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:  # gather() of nothing needs a current loop, which `asyncio.run` unset
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def gpu_memory_used() -> int:
    """Bytes in use on every GPU, as nvidia-smi shows them. vLLM's engine runs in a child
    process, so torch's allocator counters in this one stay at 0; NVML sees the device and
    creates no CUDA context here."""
    import pynvml  # nvidia-ml-py, a dependency of vllm

    pynvml.nvmlInit()
    try:
        return sum(
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
            for i in range(pynvml.nvmlDeviceGetCount())
        )
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def memory_before_engine() -> int:
    return gpu_memory_used()


@pytest.fixture(scope="module")
def generator(tmp_path_factory, loop, memory_before_engine):
    """gpu.yaml's generator: its engine options (bf16, gpu_memory_utilization, priority
    scheduling, the batch limits, prefix caching) on the tiny model."""
    root = tmp_path_factory.mktemp("vllm-gpu")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(root / "cache"))
    text = "\n".join(p.read_text() for p in CORPUS.rglob("*.md")) * 3
    model = build_tiny_model(root / "tiny", text + ' {"source": 1, "quote": "", "answer": ""}')
    config = load_config(GPU_YAML)
    settings = config.generator.model_copy(
        update={"model": str(model), "max_model_len": 4096, "engine_kwargs": engine_kwargs(config)}
    )
    engine = VllmGenerator(settings).start()
    yield engine
    engine.shutdown()


def run(loop, generator, token_ids, **options):
    async def collect():
        return [c async for c in generator.stream(token_ids, **options)]

    return loop.run_until_complete(collect())


def test_the_cuda_engine_streams_with_gpu_yaml_settings_and_caches_prefixes(
    generator, loop, memory_before_engine
):
    taken = gpu_memory_used() - memory_before_engine
    assert taken > 2**30, f"the engine is on the GPU: its weights and KV cache ({taken} bytes)"
    long = generator.render([{"role": "system", "content": "policy text " * 200},
                             {"role": "user", "content": "q"}])  # fmt: skip
    first = run(loop, generator, long, max_tokens=8, cache_salt=cache_salt("acme"))[-1]
    again = run(loop, generator, long, max_tokens=8, cache_salt=cache_salt("acme"))[-1]
    assert first.finish_reason in ("stop", "length") and first.completion_tokens > 0
    assert first.cached_tokens == 0 and again.cached_tokens >= 256
    assert generator.stats().prefix_cache_hits >= again.cached_tokens  # the metrics' source


def test_structured_output_compiles_and_constrains_on_cuda(generator, loop):
    schema = {"type": "object", "properties": {"source": {"type": "integer", "enum": [0, 1]}},
              "required": ["source"], "additionalProperties": False}  # fmt: skip
    token_ids = generator.render([{"role": "user", "content": "Which source?"}])
    chunks = run(loop, generator, token_ids, max_tokens=32, cache_salt="s", json_schema=schema)
    reply = json.loads("".join(c.text for c in chunks))
    assert reply["source"] in (0, 1)


def test_gpu_yaml_fits_this_machine():
    import torch

    assert gpu_packing(load_config(GPU_YAML), torch.cuda.device_count()) is None
