"""One model's go at an answer: generate within the admission, read the reply as it comes
(citations checked, a quoted answer held until checked), run the answer check, and account the
tokens. The pipeline makes a second attempt with the large model when a cascade asks it."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import nullcontext
from dataclasses import dataclass, field

from serve.query.admission import Admission, Grant, Usage
from serve.query.check import AnswerCheck
from serve.query.citations import ProseAnswerReader
from serve.query.fitting import PreparedPrompt
from serve.query.gate import not_found_message
from serve.query.generation import GenerationChunk, Generator
from serve.query.quotes import QuotedAnswerReader
from serve.tracing import Stopwatch, tracer


@dataclass(slots=True)
class Attempt:
    """One model's go at the answer (two when a cascade asks the large model)."""

    model: str
    prepared: PreparedPrompt
    reader: QuotedAnswerReader | ProseAnswerReader
    shown: list[str] = field(default_factory=list)  # sent to the client; never starts blank
    last: GenerationChunk | None = None
    grant: Grant = field(default_factory=Grant)
    support: float | None = None  # the answer check's P(yes)
    check_usage: Usage = field(default_factory=Usage)  # the check's (in grant.usage too)
    rest: str = ""  # what is shown once the answer is read whole
    # The reply's deltas with their tokens' log-probabilities, when asked (``logprobs``).
    tokens: list[tuple[str, tuple[float, ...]]] | None = None

    @classmethod
    def of(
        cls,
        model: str,
        prepared: PreparedPrompt,
        question: str,
        hold: bool,
        grounded_only: bool,
        confidence: bool = False,
    ) -> Attempt:
        """An attempt whose reader fits the prompt: quoted (``hold``: until its check) or
        prose; ``confidence``: its tokens' log-probabilities are asked for and kept."""
        tokens = [] if confidence else None
        if not prepared.json_schema:
            return cls(model, prepared, ProseAnswerReader(prepared.sources), tokens=tokens)
        reader = QuotedAnswerReader(prepared.sources, not_found_message(question), hold=hold,
                                    grounded_only=grounded_only, question=question)  # fmt: skip
        return cls(model, prepared, reader, tokens=tokens)

    @property
    def confidence(self) -> float | None:
        """The mean log-probability of the quoted reply's answer tokens (None: not asked, or
        no answer field)."""
        return answer_confidence(self.tokens) if self.tokens else None

    @property
    def figures_disagree(self) -> bool:
        """A quoted answer whose figures are not its quote's (quotes.figures_disagree)."""
        return isinstance(self.reader, QuotedAnswerReader) and self.reader.figures_disagree()

    @property
    def held(self) -> bool:
        return isinstance(self.reader, QuotedAnswerReader) and self.reader.hold

    def usage(self, usage: dict[str, Usage], checker: str) -> dict[str, Usage]:
        """``usage`` by model with this attempt's added: its answer's, and its check's to
        ``checker``, the model that checked it."""
        usage = dict(usage)
        for model, used in ((self.model, self.grant.usage - self.check_usage),
                            (checker, self.check_usage)):  # fmt: skip
            if used != Usage() or model == self.model:
                usage[model] = usage.get(model, Usage()) + used
        return usage


async def generate(
    attempt: Attempt,
    generator: Generator,
    check: AnswerCheck | None,
    request_id: str,
    admit: Admission | None,
    watch: Stopwatch,
    timings: dict[str, float],
    generating: float,
) -> AsyncIterator[str]:
    """``attempt``'s answer from ``generator``, checked by ``check`` (quoted answers): the
    deltas it shows as it writes; what it shows last (``attempt.rest``, once read whole and
    checked) is left to the caller, who may ask another model instead."""
    prepared, reader = attempt.prepared, attempt.reader
    check = check if prepared.json_schema else None

    def visible(delta: str) -> str:
        return delta if attempt.shown else delta.lstrip()

    reservation = len(prepared.token_ids) + prepared.max_tokens
    if check:  # the check runs within the generation's admission: reserve it too
        reservation += check.reservation(
            prepared.query, prepared.sources, prepared.max_tokens, prepared.also
        )
    async with admit(reservation, attempt.model) if admit else nullcontext(Grant()) as grant:
        attempt.grant = grant
        if admit and "admission" not in timings:
            watch.lap("admission")
            timings["admission"] = watch.timings["admission"]
        span = tracer().start_span("grounded.generate", watch.context,
                                   attributes={"grounded.model": attempt.model})  # fmt: skip

        def start(priority: int, attempt_number: int) -> AsyncIterator[GenerationChunk]:
            return generator.stream(
                prepared.token_ids,
                max_tokens=prepared.max_tokens,
                cache_salt=prepared.cache_salt,
                request_id=f"{request_id}-{attempt_number}"
                if request_id and attempt_number
                else request_id,
                priority=priority,
                json_schema=prepared.json_schema,
                logprobs=attempt.tokens is not None,
            )

        try:
            async for chunk in grant.run(start):
                started_now = attempt.last is None
                if started_now and "first_token" not in timings:
                    timings["first_token"] = since(generating)
                    span.add_event("first_token")
                attempt.last = chunk
                if attempt.tokens is not None:
                    attempt.tokens.append((chunk.text, chunk.logprobs))
                grant.usage = Usage(
                    chunk.prompt_tokens, chunk.cached_tokens, chunk.completion_tokens
                )
                if delta := visible(reader.feed(chunk.text)):
                    if not attempt.shown:  # quoted answers show text only after the quote
                        timings["first_text"] = since(generating)
                    attempt.shown.append(delta)
                    yield delta
                elif started_now:
                    yield ""  # generating, nothing to show yet (leading spaces, a "[")
        finally:
            span.end()
        if check and (pending := reader.to_check()):  # within the generation's admission
            checking = time.perf_counter()
            check_prompt = check.prompt(prepared.query, *pending)
            attempt.support = await check.support(check_prompt, prepared.cache_salt)
            timings["check"] = timings.get("check", 0.0) + since(checking)
            attempt.check_usage = Usage(len(check_prompt), 0, 1)
            grant.usage += attempt.check_usage  # reserved and settled with the answer
            if attempt.support < check.min_support:
                reader.withhold()
    attempt.rest = visible(reader.flush(attempt.last.finish_reason if attempt.last else None))


def answer_confidence(tokens) -> float | None:
    """The mean log-probability of the tokens inside a quoted reply's ``answer`` field, from
    its deltas and their tokens' log-probabilities ([(text, (logprob, ...)), ...]); None when
    the reply has no answer field. A small model's answer it is unsure of cascades to the large
    one (route.min_confidence; benchmarks/results/routing.md)."""
    text, marks = "", []
    for delta, logprobs in tokens:
        marks.append((len(text), len(text) + len(delta), logprobs))
        text += delta
    found = re.search(r'"answer":\s*"', text)
    if not found:
        return None
    start = end = found.end()
    while end < len(text) and (text[end] != '"' or text[end - 1] == "\\"):
        end += 1
    inside = [lp for a, b, logprobs in marks if b > start and a < end for lp in logprobs]
    return sum(inside) / len(inside) if inside else None


def since(start: float) -> float:
    return time.perf_counter() - start
