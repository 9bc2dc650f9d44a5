"""Several generators (issue 39): the router's decision, the cascade, per-model check
thresholds, accounting by model, and the config that names them."""

import asyncio
import json

import pytest

from index.errors import ConfigError
from index.pipeline import SourceFile
from serve.accounting.budgets import BudgetsConfig, Ledger, Prices
from serve.config import load_config
from serve.query.admission import Usage
from serve.query.attempt import answer_confidence
from serve.query.judging import RerankConfig
from serve.query.pipeline import Answer, QueryConfig, QueryPipeline
from serve.query.prompt import Turn
from serve.query.quotes import QuotedReply, figures_disagree
from serve.query.retrieval import LocalSearcher
from serve.query.routing import (
    COMPARES,
    MODEL_ID,
    NOT_FOUND_KEPT,
    FirstAnswer,
    RouteConfig,
    RouteSignals,
    cascades,
    compares,
    hard_because,
)
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.unit

LEAVE = "Annual leave is 27 days per calendar year for every employee."
QUOTE = "Annual leave is 27 days per calendar year for every employee."


@pytest.fixture
def service(fake_service):
    sources = [SourceFile.from_bytes(LEAVE.encode(), "leave.txt"),
               SourceFile.from_bytes(b"The pump needs oil every month.", "pump.txt")]  # fmt: skip
    list(fake_service.pipeline("acme").ingest(sources))
    return fake_service


# --- the router's decision --------------------------------------------------------------

SIGNALS = RouteSignals(top_score=5.0, margin=3.0, passages=2, compares=False, words=6, turns=0)
EVERY_SIGNAL = RouteConfig(min_top_score=2.0, min_margin=1.0, max_passages=3, compares=True,
                           max_words=20, follow_ups=True)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, None),
        ({"top_score": 1.5}, "low_score"),
        ({"margin": 0.5}, "close_scores"),
        ({"passages": 4}, "many_passages"),
        ({"compares": True}, "compares"),
        ({"words": 21}, "long_question"),
        ({"turns": 2}, "follow_up"),
        ({"top_score": None, "margin": None}, None),  # not judged: no score says it is hard
    ],
)
def test_each_signal_past_its_threshold_sends_the_question_to_the_large_model(change, reason):
    import dataclasses

    assert hard_because(dataclasses.replace(SIGNALS, **change), EVERY_SIGNAL) == reason


def test_an_unset_threshold_never_sends_a_question_to_the_large_model():
    hardest = RouteSignals(top_score=-9.0, margin=0.0, passages=50, compares=True, words=99,
                           turns=5)  # fmt: skip
    assert hard_because(hardest, RouteConfig(compares=False)) is None


def test_signals_are_read_from_the_judges_scores_and_the_question():
    signals = RouteSignals.of("Which is older, Rome or Paris?", [4.0, 6.5, 1.0], turns=1)
    assert (signals.top_score, signals.margin, signals.passages) == (6.5, 2.5, 3)
    assert signals.words == 6 and signals.turns == 1
    assert RouteSignals.of("q", [None, None]).top_score is None


@pytest.mark.parametrize(
    ("language", "cue"), [(lang, cue) for lang, cues in COMPARES.items() for cue in cues]
)
def test_every_compare_cue_is_recognised_as_a_whole_word(language, cue):
    assert compares(f"Tell me {cue} these two things", language)
    assert compares(f"{cue.upper()} these two things", language)
    glued = f"xx{cue.replace(' ', '')}xx"
    assert not compares(f"What is {glued}?", language)


@pytest.mark.parametrize(
    "question",
    ["When did the Lisbon earthquake happen?", "Qui a écrit Germinal ?", "How tall is it?"],
)
def test_a_plain_lookup_does_not_compare(question):
    assert not compares(question)


# --- the pipeline with two models ------------------------------------------------------


def quoted(source: int, quote: str, answer: str) -> str:
    return json.dumps({"source": source, "quote": quote, "answer": answer})


def pipeline_of(service, small, large, route=None, **query):
    config = QueryConfig(min_dense_score=0.0, **query)
    return QueryPipeline(LocalSearcher(service), {"small": small, "large": large}, config,
                         route=route or RouteConfig())  # fmt: skip


def ask(pipeline, question="annual leave days", live=False, **kwargs) -> tuple[list, Answer]:
    async def collect():
        return [item async for item in pipeline.stream("acme", question, live=live, **kwargs)]

    items = asyncio.run(collect())
    return [i for i in items if isinstance(i, str)], items[-1]


def test_a_plain_question_is_answered_by_the_small_model(service):
    small, large = ScriptedGenerator("27 days [1]."), ScriptedGenerator("unused")
    _, answer = ask(pipeline_of(service, small, large))
    assert answer.route.as_dict() == {"model": "small", "decision": "routed", "reason": None,
                                      "first": None}  # fmt: skip
    assert answer.text.startswith("27 days") and large.calls == []
    assert set(answer.model_usage) == {"small"}
    assert answer.usage == answer.model_usage["small"]


def test_a_comparison_is_routed_to_the_large_model_and_a_named_model_is_always_honoured(service):
    small, large = ScriptedGenerator("small says [1]."), ScriptedGenerator("large says [1].")
    pipeline = pipeline_of(service, small, large)
    _, answer = ask(pipeline, "annual leave days compared with pump oil")
    assert (answer.route.model, answer.route.reason) == ("large", "compares")
    assert answer.text.startswith("large says") and small.calls == []
    _, named = ask(pipeline, "annual leave days compared with pump oil", model="small")
    assert named.route.as_dict()["decision"] == "asked" and named.route.model == "small"
    assert named.text.startswith("small says")


def test_a_small_answer_that_fails_its_check_is_asked_of_the_large_model(service):
    """The cascade: the small model's quoted answer is withheld by its own check (P(yes) 0.2
    under its threshold 0.5); the large model answers, checked against its own threshold."""
    number = 1
    small = ScriptedGenerator(quoted(number, QUOTE, "27 days."), judge=lambda m: 0.2)
    large = ScriptedGenerator(quoted(number, QUOTE, "27 days a year."), judge=lambda m: 0.7)
    pipeline = QueryPipeline(
        LocalSearcher(service), {"small": small, "large": large},
        QueryConfig(min_dense_score=0.0, answer_format="quoted", top_k=1), route=RouteConfig(),
        min_support={"small": 0.5, "large": 0.6},
    )  # fmt: skip
    deltas, answer = ask(pipeline, live=True)  # held answers: nothing of the small one was sent
    assert answer.route.as_dict() == {"model": "large", "decision": "cascaded", "reason": None,
                                      "first": "small"}  # fmt: skip
    assert not answer.abstained and answer.text == "27 days a year. [1]" == "".join(deltas)
    assert answer.answer_support == pytest.approx(0.7)
    assert set(answer.model_usage) == {"small", "large"}
    total = answer.model_usage["small"] + answer.model_usage["large"]
    assert answer.usage == total and answer.model_usage["small"].completion_tokens > 0
    assert "cascade" in answer.timings and len(small.calls) == len(large.calls) == 1
    # its large check threshold is the large model's own: at 0.8 the large answer fails too
    strict = QueryPipeline(
        LocalSearcher(service), {"small": small, "large": large},
        QueryConfig(min_dense_score=0.0, answer_format="quoted", top_k=1), route=RouteConfig(),
        min_support={"small": 0.5, "large": 0.8},
    )  # fmt: skip
    assert ask(strict)[1].abstained


def test_a_small_answer_that_passes_its_check_narrowly_is_asked_of_the_large_model(service):
    """route.min_check: a small answer whose check P(yes) is over the threshold that withholds
    (0.5) but under min_check cascades; one over min_check, or without it, stands."""

    def answers(support, route):
        small = ScriptedGenerator(quoted(1, QUOTE, "27 days."), judge=lambda m: support)
        large = ScriptedGenerator(quoted(1, QUOTE, "27 days a year."), judge=lambda m: 0.9)
        pipeline = QueryPipeline(
            LocalSearcher(service), {"small": small, "large": large},
            QueryConfig(min_dense_score=0.0, answer_format="quoted", top_k=1), route=route,
            min_support={"small": 0.5, "large": 0.5},
        )  # fmt: skip
        deltas, answer = ask(pipeline, live=True)
        assert "".join(deltas) == answer.text  # the held small answer was never sent
        return answer

    narrow = answers(0.6, RouteConfig(min_check=0.8))
    assert narrow.route.decision == "cascaded" and narrow.text == "27 days a year. [1]"
    for answer in (answers(0.85, RouteConfig(min_check=0.8)), answers(0.6, RouteConfig())):
        assert answer.route.model == "small" and answer.text == "27 days. [1]"
        assert answer.route.decision == "routed"


def test_no_cascade_when_turned_off_asked_by_name_or_already_streamed(service):
    def answers(route=None, model=None, live=False):
        small = ScriptedGenerator("I do not know; not found in the sources.")
        large = ScriptedGenerator("27 days [1].")
        _, answer = ask(pipeline_of(service, small, large, route), model=model, live=live)
        return answer, large.calls

    answer, calls = answers()
    assert answer.route.decision == "cascaded" and not answer.abstained and calls
    for answer, calls in (answers(RouteConfig(cascade=False)), answers(model="small"),
                          answers(live=True)):  # prose is streamed as written  # fmt: skip
        assert answer.abstained and answer.route.model == "small" and calls == []


class FixedJudge:
    """A reranker that gives every passage one score."""

    def __init__(self, score: float) -> None:
        self.score = score

    async def scores(self, query, passages, cache_salt=""):
        return [self.score] * len(passages)


def test_a_small_not_found_is_asked_of_the_large_model_only_over_passages_judged_high(service):
    """route.not_found_min_score: the small model's own "not found" cascades where the judge's
    best score reaches the threshold; under it the small answer stands ("not found", the large
    model never asked, and the route's reason says why). A small answer withheld by its check
    cascades whatever the scores."""
    rerank = RerankConfig(backend="cross-encoder", model="unused", min_score=0.0)
    config = QueryConfig(min_dense_score=0.0, rerank=rerank, answer_format="quoted", top_k=1)

    def answers(score, route, small_reply, small_support=0.9):
        small = ScriptedGenerator(small_reply, judge=lambda m: small_support)
        large = ScriptedGenerator(quoted(1, QUOTE, "27 days a year."), judge=lambda m: 0.9)
        pipeline = QueryPipeline(LocalSearcher(service), {"small": small, "large": large},
                                 config, FixedJudge(score), route=route,
                                 min_support={"small": 0.5, "large": 0.5})  # fmt: skip
        return ask(pipeline)[1], large.calls

    not_found = json.dumps({"source": 0, "quote": "", "answer": "Not found in the sources."})
    gated = RouteConfig(not_found_min_score=3.0)
    for score, route, asked in ((4.0, gated, True), (3.0, gated, True),
                                   (2.0, gated, False), (2.0, RouteConfig(), True)):  # fmt: skip
        answer, calls = answers(score, route, not_found)
        assert bool(calls) == asked, (score, route)
        assert answer.abstained != asked
        assert answer.route.decision == ("cascaded" if asked else "routed")
        assert (answer.route.reason == NOT_FOUND_KEPT) == (not asked)  # shown, and counted
    withheld, calls = answers(2.0, gated, quoted(1, QUOTE, "27 days."), small_support=0.2)
    assert calls and withheld.route.decision == "cascaded" and not withheld.abstained


def streamed_with_cascade(service, small, route) -> tuple[Answer, list]:
    """``small``'s quoted answer on a live stream, routed by ``route`` (the large model says
    "27 days a year."): the answer, and the large model's calls. What was sent is the answer,
    no more (a cascaded small answer was held)."""
    large = ScriptedGenerator(quoted(1, QUOTE, "27 days a year."))
    pipeline = QueryPipeline(
        LocalSearcher(service), {"small": small, "large": large},
        QueryConfig(min_dense_score=0.0, answer_format="quoted", top_k=1), route=route,
    )  # fmt: skip
    deltas, answer = ask(pipeline, live=True)
    assert "".join(deltas) == answer.text
    return answer, large.calls


def test_a_small_answer_it_is_unsure_of_is_asked_of_the_large_model(service):
    """route.min_confidence: the small model's answer tokens' mean log-probability under it
    cascades (the answer held until read whole, so also on a live stream); above it, or with
    no threshold, the small answer stands and no log-probabilities are asked for."""

    def answers(logprob, route):
        small = ScriptedGenerator(quoted(1, QUOTE, "27 days."), logprob=logprob)
        answer, large_calls = streamed_with_cascade(service, small, route)
        return answer, small.calls[0]["logprobs"], large_calls

    unsure = RouteConfig(min_confidence=-0.5)
    answer, asked, calls = answers(-1.2, unsure)
    assert asked and calls and answer.route.decision == "cascaded"
    assert answer.text == "27 days a year. [1]"
    answer, asked, calls = answers(-0.1, unsure)  # sure enough
    assert asked and not calls and answer.text == "27 days. [1]"
    answer, asked, calls = answers(-1.2, RouteConfig())  # no threshold
    assert not asked and not calls and answer.route.model == "small"


def test_a_small_answer_whose_figures_are_not_its_quotes_is_asked_of_the_large_model(service):
    """route.quote_figures: a small answer stating 39 days over a quote that says 27 cascades
    (held until read whole, so also on a live stream); one that shares its quote's figure, or
    whose quote states none, stands, as does any answer without the setting."""

    def answers(quote, answer, route):
        return streamed_with_cascade(service, ScriptedGenerator(quoted(1, quote, answer)), route)

    figures = RouteConfig(quote_figures=True)
    answer, calls = answers(QUOTE, "39 days.", figures)
    assert calls and answer.route.decision == "cascaded" and answer.text == "27 days a year. [1]"
    for quote, said, route in ((QUOTE, "27 days, 39 with overtime.", figures),
                               (LEAVE.split(" is")[0], "39 days.", figures),
                               (QUOTE, "39 days.", RouteConfig())):  # fmt: skip
        answer, calls = answers(quote, said, route)
        assert not calls and answer.route.model == "small", (quote, said, route)


@pytest.mark.parametrize(
    ("quote", "also", "answer", "disagree"),
    [
        ("Leave is 27 days.", "", "39 days", True),
        ("Leave is 27 days.", "", "27 days", False),
        ("Leave is 27 days.", "", "twenty-seven days", False),  # no figure in the answer
        ("Article 2 - Cotisation", "", "45 euros, 70 to pass on", True),
        ("Annual leave", "", "27 days", False),  # the quote states no figure
        ("Leave is 27 days.", "Carry-over is 5 days.", "5 days", False),  # the second quote's
        ("Leave is 1,200 hours.", "", "1200 hours", False),  # one number however written
    ],
)
def test_figures_disagree_when_the_answer_states_none_of_its_quotes(quote, also, answer, disagree):
    reply = QuotedReply(1, quote, answer, also_source=2 if also else 0, also_quote=also)
    assert figures_disagree(reply) is disagree


def test_the_confidence_is_the_mean_over_the_answer_fields_tokens():
    tokens = [['{"source": 1, "quote": "Leave is ', [-0.1, -0.2]], ['27 days.", ', [-3.0]],
              ['"answer": "', [-0.5]], ['27 \\"', [-1.0, -2.0]], ['days', [-3.0]],
              ['"}', [-9.0]]]  # fmt: skip
    # the tokens inside the answer (an escaped quote in it), not those around it
    assert answer_confidence(tokens) == pytest.approx((-1.0 - 2.0 - 3.0) / 3)
    assert answer_confidence([["Not found in the sources.", [-0.1]]]) is None


def test_a_cascade_refused_by_admission_leaves_the_small_answer_standing(service):
    """The first answer spent the budget: the cascade's admission refuses (429) before the
    large model starts, and the small model's "not found" is the answer, not an error."""
    from contextlib import asynccontextmanager

    from index.errors import RateLimitError
    from serve.query.admission import Grant

    admitted = []

    @asynccontextmanager
    async def admit(tokens, model):
        if admitted:
            raise RateLimitError("over budget", reason="tokens_per_minute")
        admitted.append(model)
        yield Grant(model=model)

    small = ScriptedGenerator("I do not know; not found in the sources.")
    large = ScriptedGenerator("27 days [1].")
    _, answer = ask(pipeline_of(service, small, large), admit=admit)
    assert answer.abstained and answer.route.model == "small" and large.calls == []
    assert admitted == ["small"] and "cascade" in answer.timings


def test_the_gate_abstains_before_any_model_is_asked(service):
    small, large = ScriptedGenerator("x"), ScriptedGenerator("y")
    pipeline = QueryPipeline(LocalSearcher(service), {"small": small, "large": large},
                             QueryConfig(min_dense_score=0.99))  # fmt: skip
    _, answer = ask(pipeline)
    assert answer.abstained and small.calls == large.calls == []


def test_follow_ups_route_on_the_conversation(service):
    small, large = ScriptedGenerator("s [1]."), ScriptedGenerator("l [1].")
    pipeline = pipeline_of(service, small, large, RouteConfig(follow_ups=True))
    history = [Turn("user", "tell me about leave"), Turn("assistant", "sure")]
    _, answer = ask(pipeline, history=history)
    assert answer.route.reason == "follow_up" and answer.text.startswith("l")


def test_one_generator_is_the_model_named_grounded(service):
    generator = ScriptedGenerator("27 days [1].")
    pipeline = QueryPipeline(LocalSearcher(service), generator,
                             QueryConfig(min_dense_score=0.0))  # fmt: skip
    _, answer = ask(pipeline)
    assert answer.route.model == MODEL_ID and answer.route.decision == "asked"


# --- accounting by model -----------------------------------------------------------------


def test_the_ledger_keeps_each_models_tokens_and_cost(tmp_path):
    prices = Prices(prompt_per_million=1.0, completion_per_million=2.0)
    ledger = Ledger(tmp_path, BudgetsConfig(prices=prices),
                    model_prices={"large": Prices(prompt_per_million=10.0,
                                                  completion_per_million=20.0)})  # fmt: skip
    cost = ledger.record("acme", "k1", "answered", models={
        "small": Usage(1_000, 0, 100), "large": Usage(2_000, 500, 50)})  # fmt: skip
    small, large = 1_000 * 1.0 / 1e6 + 100 * 2.0 / 1e6, (1_500 * 10.0 + 50 * 20.0) / 1e6
    assert cost == pytest.approx(small + large)
    (row,) = ledger.usage()
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (3_000, 500, 150)
    assert row.models["large"]["cost"] == pytest.approx(large)
    assert row.models["small"]["prompt_tokens"] == 1_000 and row.requests == 1
    ledger.record("acme", "k1", "embedded", prompt=40)  # no model: the default prices
    (row,) = ledger.usage()
    assert row.prompt_tokens == 3_040 and set(row.models) == {"small", "large"}


# --- the config ------------------------------------------------------------------------


def two_models(**route):
    return {"models": {"small": {"model": "qwen2.5-0.5b", "min_answer_support": 0.5},
                       "large": {"model": "qwen2.5-1.5b", "max_model_len": 8192,
                                 "deployment": {"num_cpus": 2}}},
            "route": route, "max_tokens": 300}  # fmt: skip


def test_each_model_takes_what_it_leaves_out_from_the_generator():
    config = load_config(None, generator=two_models(cascade=False))
    configs = config.generator.configs()
    assert list(configs) == ["small", "large"]
    assert configs["large"].max_model_len == 8192 and configs["small"].max_model_len == 4096
    assert configs["small"].max_tokens == configs["large"].max_tokens == 300
    assert config.generator.check_thresholds() == {"small": 0.5}
    assert (config.generator.small_model, config.generator.large_model) == ("small", "large")
    assert list(load_config(None).generator.configs()) == [MODEL_ID]


@pytest.mark.parametrize(
    ("generator", "message"),
    [
        ({"models": {"only": {"model": "qwen2.5-0.5b"}}}, "name two or more"),
        ({"models": {"grounded": {"model": "a"}, "b": {"model": "b"}}}, "not a model name"),
        ({"models": {"Big Model": {"model": "a"}, "b": {"model": "b"}}}, "not a model name"),
        (two_models(small="tiny"), r"route.small is 'tiny', which is not in models"),
        (two_models(small="large", large="large"), "name the same model"),
        ({"models": {"a": {"max_tokens": 5}, "b": {"model": "b"}}}, "model"),
    ],
)
def test_a_bad_models_config_is_refused_naming_the_field(generator, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, generator=generator)


def test_a_cascade_on_the_check_needs_the_check():
    checked = two_models(min_check=0.8, large_checks=True)  # the large model checks: no threshold
    with pytest.raises(ConfigError, match=r"route\.min_check reads the answer check"):
        load_config(None, generator=checked)
    query = {"answer_format": "quoted", "min_answer_support": 0.65}
    assert load_config(None, generator=checked, query=query).generator.route.min_check == 0.8
    assert load_config(None, generator=two_models(min_check=0.8))  # the small model's own 0.5


@pytest.mark.parametrize("name", ["min_top_score", "min_margin", "not_found_min_score"])
def test_a_route_on_the_judges_scores_needs_the_judge(name):
    with pytest.raises(ConfigError, match=rf"route\.{name} reads the relevance judge's scores"):
        load_config(None, generator=two_models(**{name: 3.0}))
    query = {"rerank": {"backend": "cross-encoder", "model": "ms-marco-minilm-l12"}}
    config = load_config(None, generator=two_models(**{name: 3.0}), query=query)
    assert getattr(config.generator.route, name) == 3.0


def test_a_cascade_on_the_quotes_figures_needs_quoted_answers():
    with pytest.raises(ConfigError, match=r"route\.quote_figures compares a quoted answer"):
        load_config(None, generator=two_models(quote_figures=True))
    quoted = load_config(None, generator=two_models(quote_figures=True),
                         query={"answer_format": "quoted"})  # fmt: skip
    assert quoted.generator.route.quote_figures


def test_the_documented_routing_example_is_a_valid_config():
    """docs/configuration.md's "Several models" example, over configs/cpu.yaml."""
    import re

    import yaml

    from tests.conftest import REPO

    section = (REPO / "docs/configuration.md").read_text().split("## Several models", 1)[1]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    base = yaml.safe_load((REPO / "configs/cpu.yaml").read_text())
    base["generator"] = {**base["generator"], **example["generator"]}
    config = load_config(None, **base)
    assert list(config.generator.configs()) == ["small", "large"]
    assert config.generator.route.large_checks and config.generator.route.min_check == 0.85


@pytest.mark.parametrize(("answer", "top", "expected"), [
    (FirstAnswer(False, 0.9, None, False), 5.0, False),  # checked and sure: it stands
    (FirstAnswer(True, None, None, False), 5.0, True),  # "not found" over a strong passage
    (FirstAnswer(True, None, None, True), 1.0, None),  # kept, whatever else it shows
    (FirstAnswer(True, 0.3, None, False), 1.0, True),  # withheld by its check: never kept
    (FirstAnswer(False, 0.8, None, False), 1.0, True),  # under min_check
    (FirstAnswer(False, 0.9, -3.0, False), 5.0, True),  # unsure
    (FirstAnswer(False, 0.9, None, True), 5.0, True),  # its figures are not its quote's
])  # fmt: skip
def test_the_cascade_rule(answer, top, expected):
    route = RouteConfig(min_check=0.85, min_confidence=-2.0, quote_figures=True,
                        not_found_min_score=3.0)  # fmt: skip
    assert cascades(answer, top, route) is expected
