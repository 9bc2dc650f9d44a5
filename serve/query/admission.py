"""Admission of generator work: budgets and fair queuing see every call to the generator.

The answer's generation is admitted by the pipeline with its prompt and ``max_tokens``. The
generator is also called before the answer, by ``condense: generator`` (a rewrite of the
question) and by the generator reranker (one yes/no judgement per candidate). Those calls go
through the same admission, wrapped here, so a tenant cannot spend the engine outside its
budget or ahead of other tenants' turns (issue 14).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from serve.query.generation import GenerationChunk, Generator
from serve.query.rerankers import GeneratorReranker
from serve.query.routing import MODEL_ID


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.cached_tokens + other.cached_tokens,
                     self.completion_tokens + other.completion_tokens)  # fmt: skip

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens - other.prompt_tokens,
                     self.cached_tokens - other.cached_tokens,
                     self.completion_tokens - other.completion_tokens)  # fmt: skip


# Starts a generation: (priority, attempt) -> its chunks. Admission may call it again (attempt
# 1, 2, ...) when it preempted the generation before its first token.
StartGeneration = Callable[[int, int], AsyncIterator[GenerationChunk]]


def _start_now(start: StartGeneration) -> AsyncIterator[GenerationChunk]:
    return start(0, 0)


@dataclass(slots=True)
class Grant:
    """What admission (budgets, fair queuing) hands the generation: how to run it (fair
    queuing may preempt and restart it before its first token), and the usage so far, kept
    current as tokens arrive so that whoever admitted the request can settle it even when the
    client goes away mid-answer."""

    run: Callable[[StartGeneration], AsyncIterator[GenerationChunk]] = _start_now
    usage: Usage = Usage()
    model: str = MODEL_ID  # the generator that runs it


# Called with the most tokens a generator call may use (prompt + max_tokens) and the name of
# the model that will run it (serve/query/routing.py), just before the generator; raising
# refuses the request. Leaving the context settles ``grant.usage``.
Admission = Callable[[int, str], AbstractAsyncContextManager[Grant]]


class AdmittedGenerator:
    """A Generator whose generations are admitted one by one (condensing)."""

    def __init__(self, generator: Generator, admit: Admission, model: str) -> None:
        self.generator, self.admit, self.model = generator, admit, model
        self.max_model_len = generator.max_model_len
        self.special_tokens = generator.special_tokens
        self.count, self.encode = generator.count, generator.encode
        self.render = generator.render

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
        async with self.admit(len(token_ids) + max_tokens, self.model) as grant:

            def start(priority: int, attempt: int) -> AsyncIterator[GenerationChunk]:
                return self.generator.stream(
                    token_ids, max_tokens=max_tokens, cache_salt=cache_salt,
                    priority=priority, json_schema=json_schema, logprobs=logprobs,
                )  # fmt: skip

            async for chunk in grant.run(start):
                grant.usage = Usage(
                    chunk.prompt_tokens, chunk.cached_tokens, chunk.completion_tokens
                )
                yield chunk

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]:
        async with self.admit(len(token_ids) + 1, self.model) as grant:
            logprobs = await self.generator.next_token_logprobs(
                token_ids, allowed_token_ids=allowed_token_ids, cache_salt=cache_salt
            )
            grant.usage = Usage(len(token_ids), 0, 1)
        return logprobs


class AdmittedReranker:
    """The generator reranker admitted once per ranking, for all its candidates: one
    reservation of every judgement's prompt and token (its judgements run at once, so one per
    judgement would trip a key's ``max_concurrent`` by itself)."""

    def __init__(self, reranker: GeneratorReranker, admit: Admission, model: str) -> None:
        self.reranker, self.admit, self.model = reranker, admit, model

    async def scores(self, query: str, passages: Sequence[str], cache_salt: str) -> list[float]:
        prompts = sum(len(self.reranker.prompt(query, passage)) for passage in passages)
        async with self.admit(prompts + len(passages), self.model) as grant:
            scores = await self.reranker.scores(query, passages, cache_salt)
            grant.usage = Usage(prompts, 0, len(passages))
        return scores
