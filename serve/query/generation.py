"""What the query pipeline needs from a generator: the Generator protocol (vLLM's engine in
serve/engine/generator.py, the ingress's handle to it in serve/deployments/generator.py, a fake in
serve/testing.py), the chunks it streams, the error it fails with, and its tokenizer
(ChatTokenizer: budgets and prompts are counted with it in front of the engine)."""

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


class ChatTokenizer:
    """The generator's own tokenizer and chat template: counting, encoding and rendering
    happen wherever the budget is computed (in-process, or in the appliance's ingress, which
    loads the tokenizer from the model folder without the engine)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def from_folder(cls, folder: str) -> ChatTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(folder))

    @property
    def special_tokens(self) -> list[str]:
        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        return sorted({*self.tokenizer.all_special_tokens, *(t.content for t in added.values())})

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """The model's chat template, with the assistant turn opened."""
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        return self.encode(text)
