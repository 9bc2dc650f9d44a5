"""Fitting one model's prompt: as many of the gated passages and of the conversation as its
context window (or a budget's cap) holds, with the answer's tokens (and a quoted answer's
quotes) reserved; the template rendered is the final word on the count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from index.types import SearchHit
from serve.query.budget import ContextLengthError, plan_budget
from serve.query.compound import answered_apart, two_part_note
from serve.query.config import QueryConfig
from serve.query.gate import not_found_message
from serve.query.generation import Generator
from serve.query.prompt import SYSTEM_RULES, PromptBuilder, Source, Turn, canonical_order
from serve.query.quotes import QUOTED_RULES, answer_schema, quote_reservation
from serve.tracing import Stopwatch

MESSAGE_OVERHEAD = 8  # role markers and separators a chat template adds per message
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    token_ids: list[int]
    sources: tuple[Source, ...]
    max_tokens: int
    cache_salt: str
    timings: dict[str, float]
    json_schema: dict[str, Any] | None = None  # quoted answers: the schema the engine enforces
    query: str = ""  # what retrieval searched for: the question, condensed with earlier turns
    also: bool = False  # a quoted answer may quote a second sentence (serve/query/compound.py)
    messages: tuple[dict[str, str], ...] = ()  # the conversation that token_ids render


def fit_prompt(
    generator: Generator,
    config: QueryConfig,
    question: str,
    history: Sequence[Turn],
    hits: Sequence[SearchHit],
    query: str,
    salt: str,
    max_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    watch: Stopwatch | None = None,
) -> PreparedPrompt:
    """``generator``'s prompt: as many of ``hits`` and of ``history`` as its window holds, or
    ``max_prompt_tokens`` (a budget's cap) where that is smaller. ContextLengthError when not
    even the question with one source fits."""
    watch = watch or Stopwatch()
    count = generator.count
    quoted = config.answer_format == "quoted"
    builder = PromptBuilder(generator.special_tokens,
                            withhold=config.withhold_instructions,
                            remind=config.remind_rules,
                            rules=QUOTED_RULES if quoted else SYSTEM_RULES)  # fmt: skip
    not_found = not_found_message(question)
    # A question that asks two things, whose first part another passage answers best than
    # the whole question, is answered from two quoted sentences.
    note = two_part_note(question) if quoted and answered_apart(hits) else ""
    also = bool(note)
    asked = max_tokens or DEFAULT_MAX_TOKENS
    # max_tokens is the answer's: a quoted reply's quotes, written first, are reserved on
    # top (usage counts them), so that a small max_tokens still gets its answer.
    reserved = 0
    if quoted:
        reserved = quote_reservation([Source(0, hit) for hit in hits], count,
                                     builder.withhold, quotes=2 if also else 1)  # fmt: skip
    max_tokens = asked + reserved
    window = generator.max_model_len
    limit_name = "this model's maximum context length"
    cap = max_prompt_tokens
    if cap is not None and cap + max_tokens < window:
        window = cap + max_tokens
        limit_name = f"your budget (max_prompt_tokens {cap} + max_tokens {asked}" + (
            f" + {reserved} for the quote)" if reserved else ")"
        )
    source_tokens = [count(builder.source_block(Source(99, h))) + 2 for h in hits]
    plan = plan_budget(
        window=window,
        max_tokens=max_tokens,
        system_tokens=count(builder.system([], not_found)) + MESSAGE_OVERHEAD,
        question_tokens=count(builder.question(question, not_found, note)) + MESSAGE_OVERHEAD,
        source_tokens=source_tokens,
        history_tokens=[count(t.content) + MESSAGE_OVERHEAD for t in history],
        history_share=config.history_share,
        limit_name=limit_name,
    )
    admitted = [hits[i] for i in plan.sources]
    kept = [history[i] for i in plan.history]
    while admitted:  # counts above are per part; the rendered template is the final word
        sources = canonical_order(admitted)
        messages = builder.messages(sources, kept, question, not_found, note)
        token_ids = generator.render(messages)
        if len(token_ids) + max_tokens <= window:
            schema = answer_schema(sources, builder.withhold, also) if quoted else None
            watch.lap("prompt")
            return PreparedPrompt(token_ids, tuple(sources), max_tokens, salt,
                                  watch.timings, schema, query, also, tuple(messages))  # fmt: skip
        admitted.pop()
    needed = plan.prompt_tokens + (0 if plan.sources else min(source_tokens))
    quote = f" and {reserved} for its quote" if reserved else ""
    raise ContextLengthError(
        f"{limit_name} is {window} tokens, but the question with one source and {asked} "
        f"tokens for the answer{quote} needs {needed + max_tokens}; shorten the question or "
        "lower max_tokens"
    )
