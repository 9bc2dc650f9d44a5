"""A scripted generator for unit tests of the query pipeline (no engine, no model)."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Callable, Sequence

from serve.query.generation import GenerationChunk

_WORD = re.compile(r"\S+|\s+")


class ScriptedGenerator:
    """Counts a token per word, 'renders' by joining messages, and streams a fixed reply.

    ``judge`` stands in for the model's yes/no judgement: given the rendered messages it returns
    P(yes), which ``next_token_logprobs`` reports for the token "yes" (P(no) for "no")."""

    special_tokens = ("<|im_start|>", "<|im_end|>")

    def __init__(
        self,
        reply: str = "",
        max_model_len: int = 4096,
        judge: Callable[[list[dict[str, str]]], float] | None = None,
        finish_reason: str = "stop",
        logprob: float = -0.1,
    ) -> None:
        """``logprob``: every streamed token's log-probability, when a stream asks for them."""
        self.reply, self.finish_reason, self.logprob = reply, finish_reason, logprob
        self.max_model_len = max_model_len
        self.judge = judge
        self.calls: list[dict] = []
        self._rendered: dict[int, list[dict[str, str]]] = {}

    def encode(self, text: str) -> list[int]:
        return [hash(word) % 50_000 for word in text.split()]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        self.last_messages = messages
        token_ids = self.encode(" ".join(f"{m['role']} {m['content']}" for m in messages))
        self._rendered[hash(tuple(token_ids))] = messages
        return token_ids

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
        self.calls.append(
            {"tokens": len(token_ids), "max_tokens": max_tokens, "salt": cache_salt,
             "priority": priority, "request_id": request_id, "json_schema": json_schema,
             "logprobs": logprobs}
        )  # fmt: skip
        pieces = _WORD.findall(self.reply)
        for index, piece in enumerate(pieces, start=1):
            done = index == len(pieces)
            finish = self.finish_reason if done else None
            token = (self.logprob,) if logprobs else ()
            yield GenerationChunk(piece, finish, len(token_ids), 0, index, token)

    async def next_token_logprobs(
        self, token_ids: list[int], *, allowed_token_ids: Sequence[int], cache_salt: str
    ) -> dict[int, float]:
        if self.judge is None:
            raise AssertionError("ScriptedGenerator was given no judge")
        p_yes = min(max(self.judge(self._rendered[hash(tuple(token_ids))]), 1e-9), 1 - 1e-9)
        yes, no = self.encode("yes")[0], self.encode("no")[0]
        return {yes: math.log(p_yes), no: math.log(1 - p_yes)}


class FixedPlacement:
    """A ShardHost's placement outside Ray (serve/shards/ownership.py ``Placement``): node
    ``name`` (its folder of shard copies) and the holder ``replica-<name>``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def node(self) -> str:
        return self.name

    def holder(self) -> str:
        return f"replica-{self.name}"


class LocalShards:
    """serve/shards/host.py's ShardHost behind the shape of the Shards deployment's handle
    (``options(multiplexed_model_id=...)``, then ``method.remote(...)``), in this process:
    TenantShards (serve/shards/tenant.py) over it runs the real shard logic without Ray."""

    def __init__(self, host, tenant: str | None = None) -> None:
        self.host, self.tenant = host, tenant

    def options(self, *, multiplexed_model_id: str) -> LocalShards:
        return LocalShards(self.host, multiplexed_model_id)

    def __getattr__(self, name: str):
        operation = getattr(self.host, name)
        tenant = self.tenant

        class Method:
            @staticmethod
            def remote(*args, **kwargs):
                return operation(tenant, *args, **kwargs)

        return Method
