"""The Generator deployment: an engine (VllmGenerator unless another is injected) with its
metrics exported; and RemoteGenerator, the query pipeline's Generator in the ingress (the
tokenizer there, the engine here)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence

from serve.config import AppConfig
from serve.deployments.resources import engine_kwargs
from serve.engine.generator import EngineStats, VllmGenerator
from serve.metrics import metrics
from serve.query.generation import ChatTokenizer, GenerationChunk
from serve.query.routing import MODEL_ID

log = logging.getLogger("grounded")


class Generator:
    """The generator's engine (``engine``: a class built from the GeneratorConfig, with
    ``start``, ``stream``, ``next_token_logprobs``, ``stats`` and ``health``; vLLM's AsyncLLM
    with prefix caching unless another is injected); exports the engine's counters as
    metrics."""

    def __init__(
        self,
        config: AppConfig,
        model_folder: str,
        engine: type = VllmGenerator,
        name: str = MODEL_ID,
    ) -> None:
        """``name``: the model's name in requests and metrics (one of ``generator.models``)."""
        generator = config.generator.configs()[name]
        settings = generator.model_copy(
            update={"model": model_folder, "engine_kwargs": engine_kwargs(config, generator)}
        )
        self.name = name
        self.generator = engine(settings).start()
        self._exported = EngineStats()
        self._task: asyncio.Task | None = None

    def _export(self) -> None:
        stats, m, model = self.generator.stats(), metrics(), {"model": self.name}
        m.kv_cache_usage.set(stats.kv_cache_usage, tags=model)
        m.running.set(stats.running_requests, tags={**model, "state": "running"})
        m.running.set(stats.waiting_requests, tags={**model, "state": "waiting"})
        queries = stats.prefix_cache_queries - self._exported.prefix_cache_queries
        m.add(m.prefix_queries, queries, model)
        m.add(m.prefix_hits, stats.prefix_cache_hits - self._exported.prefix_cache_hits, model)
        self._exported = stats

    async def _export_forever(self) -> None:
        while True:  # Ray drops a gauge a few report intervals after its last set()
            self._export()
            await asyncio.sleep(2.0)

    def _ensure_exporting(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._export_forever())

    async def stream(
        self, token_ids: list[int], max_tokens: int, cache_salt: str, request_id: str,
        priority: int = 0, json_schema: dict | None = None, logprobs: bool = False,
    ) -> AsyncIterator[GenerationChunk]:  # fmt: skip
        self._ensure_exporting()
        async for chunk in self.generator.stream(
            token_ids, max_tokens=max_tokens, cache_salt=cache_salt, request_id=request_id,
            priority=priority, json_schema=json_schema, logprobs=logprobs,
        ):  # fmt: skip
            yield chunk
        self._export()

    async def next_token_logprobs(
        self, token_ids: list[int], allowed_token_ids: list[int], cache_salt: str
    ) -> dict[int, float]:
        return await self.generator.next_token_logprobs(
            token_ids, allowed_token_ids=allowed_token_ids, cache_salt=cache_salt
        )

    def check_health(self) -> None:
        if not self.generator.health():
            raise RuntimeError("the vLLM engine has failed")


class RemoteGenerator:
    """The query pipeline's Generator in the ingress: the tokenizer here, the engine there."""

    def __init__(self, tokenizer: ChatTokenizer, handle, max_model_len: int) -> None:
        self.tokenizer, self.handle, self.max_model_len = tokenizer, handle, max_model_len

    @property
    def special_tokens(self) -> list[str]:
        return self.tokenizer.special_tokens

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        return self.tokenizer.render(messages)

    async def stream(
        self,
        token_ids: list[int],
        *,
        max_tokens: int,
        cache_salt: str,
        request_id: str = "",
        priority: int = 0,
        json_schema: dict | None = None,
        logprobs: bool = False,
    ) -> AsyncIterator[GenerationChunk]:
        response = self.handle.options(stream=True).stream.remote(
            token_ids, max_tokens, cache_salt, request_id or uuid.uuid4().hex, priority,
            json_schema, logprobs,
        )  # fmt: skip
        finished = False
        try:
            async for chunk in response:
                finished = chunk.finish_reason is not None
                yield chunk
        finally:
            if not finished:  # the client went away: the replica's stream aborts the request
                response.cancel()

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]:
        return await self.handle.next_token_logprobs.remote(
            token_ids, list(allowed_token_ids), cache_salt
        )
