"""A scripted generator for unit tests of the query pipeline (no engine, no model)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from serve.generator import GenerationChunk

_WORD = re.compile(r"\S+|\s+")


class ScriptedGenerator:
    """Counts a token per word, 'renders' by joining messages, and streams a fixed reply."""

    special_tokens = ("<|im_start|>", "<|im_end|>")

    def __init__(self, reply: str = "", max_model_len: int = 4096) -> None:
        self.reply = reply
        self.max_model_len = max_model_len
        self.calls: list[dict] = []

    def count(self, text: str) -> int:
        return len(text.split())

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        self.last_messages = messages
        words = " ".join(f"{m['role']} {m['content']}" for m in messages).split()
        return [hash(word) % 50_000 for word in words]

    async def stream(
        self, token_ids: list[int], *, max_tokens: int, cache_salt: str, request_id: str = ""
    ) -> AsyncIterator[GenerationChunk]:
        self.calls.append({"tokens": len(token_ids), "max_tokens": max_tokens, "salt": cache_salt})
        pieces = _WORD.findall(self.reply)
        for index, piece in enumerate(pieces, start=1):
            done = index == len(pieces)
            yield GenerationChunk(piece, "stop" if done else None, len(token_ids), 0, index)
