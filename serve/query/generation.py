"""What the query pipeline needs from a generator: the Generator protocol (vLLM's engine in
serve/generator.py, the ingress's handle to it in serve/deployments/generator.py, a fake in
serve/testing.py), the chunks it streams, and the error it fails with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from index.errors import GroundedError


class GeneratorUnavailableError(GroundedError):
    status = 503
    type = "service_unavailable"


@dataclass(frozen=True, slots=True)
class GenerationChunk:
    """One streamed delta; the last one has ``finish_reason`` and the usage counts."""

    text: str
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    logprobs: tuple[float, ...] = ()  # this delta's tokens' log-probabilities, when asked


class Generator(Protocol):
    """What the query pipeline needs from a generator (VllmGenerator, or a fake in tests)."""

    max_model_len: int
    special_tokens: Sequence[str]

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def render(self, messages: list[dict[str, str]]) -> list[int]: ...

    def stream(
        self,
        token_ids: list[int],
        *,
        max_tokens: int,
        cache_salt: str,
        request_id: str = "",
        priority: int = 0,
        json_schema: dict[str, Any] | None = None,
        logprobs: bool = False,  # each chunk's tokens' log-probabilities (GenerationChunk)
    ) -> AsyncIterator[GenerationChunk]: ...

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]: ...
