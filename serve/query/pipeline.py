"""The query pipeline: condense -> retrieve -> rerank -> gate -> budget -> prompt -> generate
-> check citations. The gate is the relevance judge's where it applies (its languages, a
threshold set), else the similarity gate before any reranking.

Plain Python (no Ray): the appliance's deployments wrap it, and tests run it directly.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from index.errors import GroundedError
from index.types import SearchHit
from serve.query.admission import (
    Admission,
    AdmittedGenerator,
    AdmittedReranker,
    Grant,
    Usage,
)
from serve.query.budget import ContextLengthError, check_question_fits, plan_budget
from serve.query.citations import Citation, ProseAnswerReader, Statement, supported_share
from serve.query.compound import answered_apart, question_parts, two_part_note
from serve.query.condense import condense_query
from serve.query.config import QueryConfig
from serve.query.gate import EvidenceGate, not_found_message
from serve.query.generation import GenerationChunk, Generator
from serve.query.judging import Reranker, judge_threshold
from serve.query.language import detect_language
from serve.query.prompt import (
    SYSTEM_RULES,
    PromptBuilder,
    Source,
    Turn,
    cache_salt,
    canonical_order,
)
from serve.query.quotes import (
    QUOTED_RULES,
    AnswerCheck,
    QuotedAnswerReader,
    answer_schema,
    quote_reservation,
)
from serve.query.relevance import scored
from serve.query.rerank import rerank
from serve.query.rerankers import GeneratorReranker, build_reranker
from serve.query.retrieval import Searcher, SearchFilter, SearchParams
from serve.query.routing import MODEL_ID, Route, RouteConfig, RouteSignals, hard_because
from serve.tracing import Stopwatch, tracer

MESSAGE_OVERHEAD = 8  # role markers and separators a chat template adds per message
DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    cited: tuple[Citation, ...]  # verified citations, in order of first use
    sources: tuple[Source, ...]  # every source that was in the prompt
    abstained: bool
    invalid_citations_removed: int = 0
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    statements: tuple[Statement, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    citations_written: int = 0  # [n] numbers the model wrote, before invalid ones were removed
    answer_support: float | None = None  # the answer check's P(yes), where it ran
    # The model that wrote the answer, and how it was chosen.
    route: Route = field(default_factory=lambda: Route(MODEL_ID))
    model_usage: dict[str, Usage] = field(default_factory=dict)  # ``usage`` by model

    @property
    def supported_share(self) -> float:
        return supported_share(self.statements)


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


@dataclass(frozen=True, slots=True)
class QueryOptions:
    """Per-request overrides of the configured retrieval (the API's extension parameters)."""

    top_k: int | None = None
    search_filter: SearchFilter | None = None
    score_threshold: float | None = None  # on the relevance a client sees (query/relevance.py)
    rerank: bool | None = None  # None: rerank when a reranker is configured
    gate: bool = True  # False: rank without the gates (retrieval-only search, eval)
    max_prompt_tokens: int | None = None  # a budget's cap: sources are trimmed to fit it


def readers_of(options: QueryOptions) -> frozenset[str] | None:
    """The principals the asker reads as (None: every document of the tenant)."""
    return options.search_filter.readable_by if options.search_filter else None


class QueryPipeline:
    def __init__(
        self,
        searcher: Searcher,
        generator: Generator | Mapping[str, Generator] | None,
        config: QueryConfig,
        reranker: Reranker | None = None,
        route: RouteConfig | None = None,
        min_support: Mapping[str, float | None] | None = None,
    ) -> None:
        """``generator``: one, or several by model name (serve/query/routing.py), which
        ``route`` chooses between (its small model also condenses and, as the generator
        reranker, judges); ``min_support``: a model's own answer check threshold, where it is
        not ``config.min_answer_support``. ``reranker`` defaults to the one ``config.rerank``
        describes (the appliance passes its reranker deployment instead)."""
        if generator is None or not isinstance(generator, Mapping):
            generator = {MODEL_ID: generator} if generator is not None else {}
        self.generators = dict(generator)
        self.route_config = route or RouteConfig()
        names = list(self.generators) or [MODEL_ID]
        self.small = self.route_config.small or names[0]
        self.large = self.route_config.large or names[-1]
        self.searcher = searcher
        self.generator = self.generators.get(self.small)
        self.config = config
        self.gate = EvidenceGate(config.min_dense_score, config.min_bm25_score)
        self.reranker = reranker or build_reranker(config.rerank, self.generator)
        # Each model's answers are checked by itself, or, with route.large_checks, the small
        # model's by the large one (at the large model's threshold).
        self.checks: dict[str, AnswerCheck] = {}
        self.checkers: dict[str, str] = {}
        for name in self.generators:
            checker = name
            if self.route_config.large_checks and name == self.small and len(self.generators) > 1:
                checker = self.large
            threshold = (min_support or {}).get(checker, config.min_answer_support)
            if threshold is not None:
                self.checkers[name] = checker
                self.checks[name] = AnswerCheck(self.generators[checker], threshold,
                                                config.withhold_instructions)  # fmt: skip
        self.answer_check = self.checks.get(self.small)

    async def retrieve(
        self,
        tenant: str,
        query: str,
        options: QueryOptions = QueryOptions(),
        watch: Stopwatch | None = None,
        admit: Admission | None = None,
    ) -> list[SearchHit]:
        """Candidates that pass the gate (unless ``options.gate`` is off): the judge gate where
        it applies, else the similarity gate; best first, reranked when configured, at most
        ``top_k``. The shard is the tenant's own: no option can widen the scope. ``admit``
        admits the generator reranker's work, when it runs."""
        config, watch = self.config, watch or Stopwatch()
        top_k = options.top_k or config.top_k
        # What the client sees, in [0, 1]; the generator judge's score is a probability already.
        floor, probability = options.score_threshold, config.rerank.backend == "generator"
        params = SearchParams(
            mode=config.mode,
            fusion=config.fusion,
            dense_weight=config.dense_weight,
            pool=config.candidates,
            search_filter=options.search_filter,
        )
        # everything both sides found, fused
        ranked = await self.searcher.search(tenant, query, 2 * config.candidates, params)
        hits = [hit for hit, _ in ranked]
        language, languages = detect_language(query), config.rerank.languages
        judged = (self.reranker is not None and options.rerank is not False
                  and (languages is None or language in languages))  # fmt: skip
        threshold = judge_threshold(config.rerank, language) if judged else None
        # Where the judge gate applies, it alone decides: its thresholds were chosen on the
        # ungated candidates, and the similarity gate drops answering passages that only
        # lexical search found (no cosine score) before the judge reads them
        # (benchmarks/results/judge.md, "One gate per question").
        if options.gate and threshold is None:
            hits = self.gate.filter(hits)
        watch.lap("retrieve")
        if not judged or not hits:
            return scored(hits, floor, probability)[:top_k]
        reranker = self.reranker
        if admit is not None and isinstance(reranker, GeneratorReranker):
            reranker = AdmittedReranker(reranker, admit, self.small)
        reranked = await rerank(
            reranker,
            query,
            hits[: config.rerank.candidates],
            config.rerank.top_n or top_k,
            cache_salt(tenant, readers_of(options)),
            first_part=next(iter(question_parts(query, language)), ""),
        )
        watch.lap("rerank")
        # The judge gate (benchmarks/results/judge.md, "Abstaining on judged relevance").
        if options.gate and threshold is not None:
            reranked = [h for h in reranked if h.rerank_score >= threshold]
        return scored(reranked, floor, probability)[:top_k]

    async def evidence(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        options: QueryOptions = QueryOptions(),
        watch: Stopwatch | None = None,
        admit: Admission | None = None,
    ) -> tuple[str, list[SearchHit]]:
        """What retrieval searched for (the question, condensed with earlier turns) and the
        passages that passed the gate (none: abstain). ``admit`` admits the generator's work
        before the answer (condensing, reranking)."""
        watch = watch or Stopwatch()
        check_question_fits(question, max_tokens or DEFAULT_MAX_TOKENS, self.generator)
        salt = cache_salt(tenant, readers_of(options))
        condenser = self.generator
        if admit is not None:
            condenser = AdmittedGenerator(self.generator, admit, self.small)
        query = await condense_query(question, history, self.config.condense,
                                     self.config.condense_turns, condenser, salt)  # fmt: skip
        watch.lap("condense")
        return query, await self.retrieve(tenant, query, options, watch, admit)

    async def prepare(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        options: QueryOptions = QueryOptions(),
        watch: Stopwatch | None = None,
        admit: Admission | None = None,
    ) -> PreparedPrompt | None:
        """The small model's prompt, or None when no source passes the gate (abstain)."""
        watch = watch or Stopwatch()
        query, hits = await self.evidence(tenant, question, history, max_tokens, options,
                                          watch, admit)  # fmt: skip
        if not hits:
            return None
        return self.prompt(self.small, tenant, question, history, hits, query, max_tokens,
                           options, watch)  # fmt: skip

    def route(
        self, question: str, hits: Sequence[SearchHit], history: Sequence[Turn], model: str | None
    ) -> Route:
        """The model that answers: the one asked for by name, else the router's choice."""
        if model is not None or len(self.generators) < 2:
            return Route(model or self.small)
        reason = hard_because(RouteSignals.of_hits(question, hits, len(history)),
                              self.route_config)  # fmt: skip
        return Route(self.large if reason else self.small, "routed", reason)

    def prompt(
        self,
        model: str,
        tenant: str,
        question: str,
        history: Sequence[Turn],
        hits: Sequence[SearchHit],
        query: str,
        max_tokens: int | None = None,
        options: QueryOptions = QueryOptions(),
        watch: Stopwatch | None = None,
    ) -> PreparedPrompt:
        """``model``'s prompt: as many of ``hits`` and of the history as its window (or the
        budget's cap) holds."""
        watch, generator = watch or Stopwatch(), self.generators[model]
        salt = cache_salt(tenant, readers_of(options))
        count = generator.count
        quoted = self.config.answer_format == "quoted"
        builder = PromptBuilder(generator.special_tokens,
                                withhold=self.config.withhold_instructions,
                                remind=self.config.remind_rules,
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
        cap = options.max_prompt_tokens
        if cap is not None and cap + max_tokens < window:
            window = cap + max_tokens
            limit_name = (
                f"your budget (max_prompt_tokens {options.max_prompt_tokens} + max_tokens "
                f"{asked}" + (f" + {reserved} for the quote)" if reserved else ")")
            )
        source_tokens = [count(builder.source_block(Source(99, h))) + 2 for h in hits]
        plan = plan_budget(
            window=window,
            max_tokens=max_tokens,
            system_tokens=count(builder.system([], not_found)) + MESSAGE_OVERHEAD,
            question_tokens=count(builder.question(question, not_found, note)) + MESSAGE_OVERHEAD,
            source_tokens=source_tokens,
            history_tokens=[count(t.content) + MESSAGE_OVERHEAD for t in history],
            history_share=self.config.history_share,
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
                                      watch.timings, schema, query, also)  # fmt: skip
            admitted.pop()
        needed = plan.prompt_tokens + (0 if plan.sources else min(source_tokens))
        quote = f" and {reserved} for its quote" if reserved else ""
        raise ContextLengthError(
            f"{limit_name} is {window} tokens, but the question with one source and {asked} "
            f"tokens for the answer{quote} needs {needed + max_tokens}; shorten the question or "
            "lower max_tokens"
        )

    async def stream(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        request_id: str = "",
        options: QueryOptions = QueryOptions(),
        admit: Admission | None = None,
        model: str | None = None,
        live: bool = True,
    ) -> AsyncIterator[str | Answer]:
        """Checked text deltas as the model writes them, then the final Answer. Invalid
        citations never appear in the deltas (they are held back until checked), nor does
        leading whitespace: the deltas add up to the answer's text, which citation offsets
        index; an empty delta marks that the generation has started when its first token
        shows nothing yet. ``admit``, when given, is entered with the tokens the answer may
        use (prompt + max_tokens) and its model right before the generator, and left when the
        generation ends (budgets and fair queuing in the appliance). ``model``: the generator
        asked for by name (None: routed, where there are several). ``live``: the deltas reach
        the client as they come (a stream); else only the Answer does, and a cascade may
        replace an answer whose deltas were already yielded."""
        root = tracer().start_span(
            "grounded.query",
            attributes={"grounded.request_id": request_id, "grounded.tenant": tenant},
        )
        try:
            async for item in self._stream(root, tenant, question, history, max_tokens,
                                           request_id, options, admit, model,
                                           live):  # fmt: skip
                if isinstance(item, Answer):
                    root.set_attribute("grounded.abstained", item.abstained)
                    root.set_attribute("grounded.completion_tokens", item.usage.completion_tokens)
                    root.set_attribute("grounded.model", item.route.model)
                yield item
        finally:
            root.end()

    async def _stream(
        self, root, tenant, question, history, max_tokens, request_id, options, admit, model,
        live,
    ):  # fmt: skip
        started = time.perf_counter()
        watch = Stopwatch(root)
        query, hits = await self.evidence(tenant, question, history, max_tokens, options,
                                          watch, admit)  # fmt: skip
        if not hits:
            text = not_found_message(question)
            yield text
            yield Answer(text, (), (), abstained=True, timings={"total": _since(started)},
                         route=Route(model or self.small, "gate"))  # fmt: skip
            return
        route = self.route(question, hits, history, model)
        prepared = self.prompt(route.model, tenant, question, history, hits, query, max_tokens,
                               options, watch)  # fmt: skip
        timings = dict(watch.timings)
        attempt = _Attempt(route.model, prepared, self._reader(prepared, route.model, question))
        generating = time.perf_counter()
        async for delta in self._generate(attempt, request_id, admit, watch, timings, generating):
            yield delta
        usage = self._usage({}, attempt)
        if self._cascades(route, attempt, live):
            cascading = time.perf_counter()
            prepared = self.prompt(self.large, tenant, question, history, hits, query,
                                   max_tokens, options)  # fmt: skip
            large = _Attempt(self.large, prepared, self._reader(prepared, self.large, question))
            try:
                async for delta in self._generate(large, f"{request_id}-c" if request_id else "",
                                                  admit, watch, timings, generating):  # fmt: skip
                    yield delta
            except GroundedError as exc:
                # Refused before it started (a budget spent by the first answer, a full
                # queue): the small model's answer stands, as it would have without a cascade.
                if exc.status != 429 or large.last is not None:
                    raise
                prepared = attempt.prepared
            else:
                route = Route(self.large, "cascaded", route.reason, first=route.model)
                attempt = large
                usage = self._usage(usage, attempt)
            timings["cascade"] = _since(cascading)
        if attempt.rest:
            if attempt.held and not attempt.shown:  # a held answer: its first text is now
                timings["first_text"] = _since(generating)
            yield attempt.rest
        timings["generate"] = _since(generating)
        timings["total"] = _since(started)
        # Statement spans index the answer text, which is exactly what was streamed.
        checked = attempt.reader.result()
        yield Answer(
            text=checked.text.rstrip(),
            cited=checked.cited,
            sources=prepared.sources,
            abstained=checked.abstained,
            invalid_citations_removed=checked.invalid_removed,
            citations_written=checked.written,
            usage=sum(usage.values(), Usage()),
            finish_reason=attempt.last.finish_reason if attempt.last else None,
            statements=checked.statements,
            timings=timings,
            answer_support=attempt.support,
            route=route,
            model_usage=usage,
        )

    def _usage(self, usage: dict[str, Usage], attempt: _Attempt) -> dict[str, Usage]:
        """``usage`` by model with ``attempt``'s added: its answer's, and its check's to the
        model that checked it."""
        usage = dict(usage)
        checker = self.checkers.get(attempt.model, attempt.model)
        for model, used in ((attempt.model, attempt.grant.usage - attempt.check_usage),
                            (checker, attempt.check_usage)):  # fmt: skip
            if used != Usage() or model == attempt.model:
                usage[model] = usage.get(model, Usage()) + used
        return usage

    def _reader(
        self, prepared: PreparedPrompt, model: str, question: str
    ) -> QuotedAnswerReader | ProseAnswerReader:
        if not prepared.json_schema:
            return ProseAnswerReader(prepared.sources)
        return QuotedAnswerReader(prepared.sources, not_found_message(question),
                                  hold=model in self.checks,
                                  grounded_only=self.config.grounded_only,
                                  question=question)  # fmt: skip

    def _cascades(self, route: Route, attempt: _Attempt, live: bool) -> bool:
        """The small model's routed answer failed (its check, grounding, or it found nothing)
        and nothing of it was sent: the large model is asked."""
        return (self.route_config.cascade and route.decision == "routed"
                and route.model != self.large and not (live and attempt.shown)
                and attempt.reader.result().abstained)  # fmt: skip

    async def _generate(
        self,
        attempt: _Attempt,
        request_id: str,
        admit: Admission | None,
        watch: Stopwatch,
        timings: dict[str, float],
        generating: float,
    ) -> AsyncIterator[str]:
        """One model's answer, checked: the deltas it shows as it writes; what it shows last
        (``attempt.rest``, once read whole and checked) is left to the caller, who may ask
        another model instead."""
        prepared, reader = attempt.prepared, attempt.reader
        check = self.checks.get(attempt.model) if prepared.json_schema else None

        def visible(delta: str) -> str:
            return delta if attempt.shown else delta.lstrip()

        reservation = len(prepared.token_ids) + prepared.max_tokens
        if check:  # the check runs within the generation's admission: reserve it too
            reservation += check.reservation(
                prepared.query, prepared.sources, prepared.max_tokens, prepared.also
            )
        generator = self.generators[attempt.model]
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
                )

            try:
                async for chunk in grant.run(start):
                    started_now = attempt.last is None
                    if started_now and "first_token" not in timings:
                        timings["first_token"] = _since(generating)
                        span.add_event("first_token")
                    attempt.last = chunk
                    grant.usage = Usage(
                        chunk.prompt_tokens, chunk.cached_tokens, chunk.completion_tokens
                    )
                    if delta := visible(reader.feed(chunk.text)):
                        if not attempt.shown:  # quoted answers show text only after the quote
                            timings["first_text"] = _since(generating)
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
                timings["check"] = timings.get("check", 0.0) + _since(checking)
                attempt.check_usage = Usage(len(check_prompt), 0, 1)
                grant.usage += attempt.check_usage  # reserved and settled with the answer
                if attempt.support < check.min_support:
                    reader.withhold()
        attempt.rest = visible(reader.flush(attempt.last.finish_reason if attempt.last else None))

    async def answer(
        self,
        tenant: str,
        question: str,
        history: Sequence[Turn] = (),
        max_tokens: int | None = None,
        request_id: str = "",
        options: QueryOptions = QueryOptions(),
        admit: Admission | None = None,
        model: str | None = None,
    ) -> Answer:
        async for item in self.stream(
            tenant, question, history, max_tokens, request_id, options, admit, model, live=False
        ):
            if isinstance(item, Answer):
                return item
        raise AssertionError("QueryPipeline.stream ended without an Answer")


@dataclass(slots=True)
class _Attempt:
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

    @property
    def held(self) -> bool:
        return isinstance(self.reader, QuotedAnswerReader) and self.reader.hold


def _since(start: float) -> float:
    return time.perf_counter() - start
