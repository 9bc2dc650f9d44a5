"""Token budgeting: fit system text, sources, history, question and answer into the window.

A pure function over token counts measured with the generator's own tokenizer (DESIGN.md
decision 10): window = system + sources + history + question + max_tokens. Sources are admitted
by rank until their share is spent; history is trimmed oldest first within its share; the
latest question is always kept; a request that cannot fit is refused with both numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from index.errors import InvalidRequestError


class ContextLengthError(InvalidRequestError):
    """The request cannot fit the model's window (OpenAI's ``context_length_exceeded``)."""

    param = "messages"


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    sources: tuple[int, ...]  # indices into the ranked sources, in rank order
    history: tuple[int, ...]  # indices into the history turns that are kept, oldest first
    max_tokens: int
    prompt_tokens: int  # system + admitted sources + kept history + question


def check_question_fits(question: str, max_tokens: int, generator) -> None:
    """Refuse, before any retrieval or judging, a question that cannot fit the model's window
    with its answer (a 200,000-character paste): the same 400 the full plan would give."""
    window = generator.max_model_len
    tokens = generator.count(question)
    if tokens + max_tokens > window:
        raise ContextLengthError(
            f"this model's maximum context length is {window} tokens, but the question alone "
            f"is {tokens} tokens and the answer needs {max_tokens}; shorten the question or "
            "lower max_tokens"
        )


def plan_budget(
    *,
    window: int,
    max_tokens: int,
    system_tokens: int,
    question_tokens: int,
    source_tokens: Sequence[int],
    history_tokens: Sequence[int] = (),
    history_share: float = 0.25,
    limit_name: str = "this model's maximum context length",
) -> BudgetPlan:
    """Decide what goes into the prompt; raises ContextLengthError when nothing sensible fits."""
    if max_tokens <= 0:
        raise InvalidRequestError(
            f"max_tokens must be positive, got {max_tokens}", param="max_tokens"
        )
    required = system_tokens + question_tokens + max_tokens
    if required > window:
        raise ContextLengthError(
            f"{limit_name} is {window} tokens, but the request needs "
            f"{required} ({system_tokens} for instructions, {question_tokens} for the question, "
            f"{max_tokens} for the answer); shorten the question or lower max_tokens"
        )
    free = window - required
    history_budget = int(free * history_share)
    history: list[int] = []
    spent = 0
    for index in range(len(history_tokens) - 1, -1, -1):  # newest first, so oldest are dropped
        if spent + history_tokens[index] > history_budget:
            break
        spent += history_tokens[index]
        history.insert(0, index)
    sources: list[int] = []
    remaining = free - spent
    for index, tokens in enumerate(source_tokens):  # by rank, until the budget is spent
        if tokens > remaining:
            break
        remaining -= tokens
        sources.append(index)
    prompt = window - max_tokens - remaining
    return BudgetPlan(tuple(sources), tuple(history), max_tokens, prompt)
