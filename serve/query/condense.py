"""The retrieval query for a turn of a conversation.

Every turn re-retrieves. A follow-up ("and how many can be carried over?") names its subject
only in earlier turns, so the query may be condensed with recent history:

- ``none``: the latest question alone.
- ``recent``: the latest question followed by the user's previous questions (newest first, at
  most ``turns``); no model call, and a new topic still dominates through the latest question.
- ``generator``: the generator rewrites the latest question into a standalone one (one short
  generation before retrieval; falls back to ``recent`` if it returns nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from serve.query.generation import Generator
from serve.query.prompt import PromptBuilder, Turn

Condense = Literal["none", "recent", "generator"]

REWRITE_SYSTEM = (
    "Rewrite the user's last question so that it can be understood without the conversation. "
    "Keep its language, names and numbers. Reply with the rewritten question only."
)
REWRITE_MAX_TOKENS = 64


def recent_query(question: str, history: Sequence[Turn], turns: int) -> str:
    earlier = [turn.content for turn in reversed(history) if turn.role == "user"][:turns]
    return "\n".join([question, *earlier])


async def condense_query(
    question: str,
    history: Sequence[Turn],
    mode: Condense,
    turns: int,
    generator: Generator,
    cache_salt: str,
) -> str:
    if mode == "none" or not history or turns == 0:
        return question
    if mode == "recent":
        return recent_query(question, history, turns)
    escape = PromptBuilder(generator.special_tokens).escape
    conversation = "\n".join(
        f"{turn.role}: {escape(turn.content)}" for turn in history[-2 * turns :]
    )
    token_ids = generator.render([
        {"role": "system", "content": REWRITE_SYSTEM},
        {"role": "user",
         "content": f"Conversation:\n{conversation}\n\nLast question: {escape(question)}"},
    ])  # fmt: skip
    parts = [
        chunk.text
        async for chunk in generator.stream(
            token_ids, max_tokens=REWRITE_MAX_TOKENS, cache_salt=cache_salt
        )
    ]
    rewritten = "".join(parts).strip()
    return rewritten or recent_query(question, history, turns)
