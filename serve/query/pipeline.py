"""The query pipeline: condense -> retrieve -> rerank -> gate -> budget -> prompt -> generate
-> check citations. The gate is the relevance judge's where it applies (its languages, a
threshold set), else the similarity gate before any reranking.

Plain Python (no Ray): the appliance's deployments wrap it, and tests run it directly.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from index.errors import GroundedError
from index.types import SearchHit
from serve.query.admission import Admission, AdmittedGenerator, AdmittedReranker, Usage
from serve.query.attempt import Attempt, generate, since
from serve.query.budget import check_question_fits
from serve.query.check import AnswerCheck
from serve.query.citations import Citation, Statement, supported_share
from serve.query.compound import question_parts
from serve.query.condense import condense_query
from serve.query.config import QueryConfig
from serve.query.fitting import DEFAULT_MAX_TOKENS, PreparedPrompt, fit_prompt
from serve.query.gate import EvidenceGate, not_found_message
from serve.query.generation import Generator
from serve.query.judging import Reranker, judge_threshold
from serve.query.language import detect_language
from serve.query.prompt import Source, Turn, cache_salt
from serve.query.relevance import scored
from serve.query.rerank import rerank
from serve.query.rerankers import GeneratorReranker, build_reranker
from serve.query.retrieval import Searcher, SearchFilter, SearchParams
from serve.query.routing import (
    MODEL_ID,
    NOT_FOUND_KEPT,
    FirstAnswer,
    Route,
    RouteConfig,
    RouteSignals,
    cascades,
    hard_because,
    top_score,
)
from serve.tracing import Stopwatch, tracer


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
    reader = options.search_filter.readable_by if options.search_filter else None
    return None if reader is None else reader.readers


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
        return fit_prompt(self.generators[model], self.config, question, history, hits, query,
                          cache_salt(tenant, readers_of(options)), max_tokens,
                          options.max_prompt_tokens, watch)  # fmt: skip

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
            yield Answer(text, (), (), abstained=True, timings={"total": since(started)},
                         route=Route(model or self.small, "gate"))  # fmt: skip
            return
        route = self.route(question, hits, history, model)
        prepared = self.prompt(route.model, tenant, question, history, hits, query, max_tokens,
                               options, watch)  # fmt: skip
        timings = dict(watch.timings)
        may_cascade = self._may_cascade(route)
        confidence = may_cascade and self.route_config.min_confidence is not None
        attempt = self._attempt(route.model, prepared, question, confidence,
                                hold=may_cascade and self.route_config.quote_figures)  # fmt: skip
        generating = time.perf_counter()
        async for delta in self._generate(attempt, request_id, admit, watch, timings, generating):
            yield delta
        usage = attempt.usage({}, self.checkers.get(attempt.model, attempt.model))
        cascadable = may_cascade and not (live and attempt.shown)  # nothing of it sent
        cascade = cascadable and self._cascade(attempt, hits)
        if cascadable and cascade is None:
            route = Route(route.model, route.decision, NOT_FOUND_KEPT)
        elif cascade:
            cascading = time.perf_counter()
            prepared = self.prompt(self.large, tenant, question, history, hits, query,
                                   max_tokens, options)  # fmt: skip
            large = self._attempt(self.large, prepared, question)
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
                usage = attempt.usage(usage, self.checkers.get(attempt.model, attempt.model))
            timings["cascade"] = since(cascading)
        if attempt.rest:
            if attempt.held and not attempt.shown:  # a held answer: its first text is now
                timings["first_text"] = since(generating)
            yield attempt.rest
        timings["generate"] = since(generating)
        timings["total"] = since(started)
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

    def _attempt(
        self,
        model: str,
        prepared: PreparedPrompt,
        question: str,
        confidence: bool = False,
        hold: bool = False,
    ) -> Attempt:
        """``confidence``: its answer tokens' log-probabilities kept (route.min_confidence);
        the answer is then held until read whole, as a checked one is, and as it is with
        ``hold`` (route.quote_figures reads the whole reply)."""
        return Attempt.of(model, prepared, question,
                          hold=model in self.checks or confidence or hold,
                          grounded_only=self.config.grounded_only,
                          confidence=confidence)  # fmt: skip

    def _generate(self, attempt: Attempt, *args) -> AsyncIterator[str]:
        """``attempt``'s deltas from its model, checked by its check (serve/query/attempt.py)."""
        return generate(attempt, self.generators[attempt.model],
                        self.checks.get(attempt.model), *args)  # fmt: skip

    def _may_cascade(self, route: Route) -> bool:
        return (self.route_config.cascade and route.decision == "routed"
                and route.model != self.large)  # fmt: skip

    def _cascade(self, attempt: Attempt, hits: Sequence[SearchHit]) -> bool | None:
        """Whether the small model's answer goes to the large model (serve/query/routing.py
        ``cascades``); None: its "not found" is kept (NOT_FOUND_KEPT)."""
        first = FirstAnswer(attempt.reader.result().abstained, attempt.support,
                            attempt.confidence, attempt.figures_disagree)  # fmt: skip
        return cascades(first, top_score(hit.rerank_score for hit in hits), self.route_config)

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
