import asyncio
import json

import pytest

from index.pipeline import SourceFile
from serve.query.budget import ContextLengthError
from serve.query.gate import NOT_FOUND
from serve.query.judging import RerankConfig
from serve.query.pipeline import Answer, QueryConfig, QueryOptions, QueryPipeline
from serve.query.prompt import Turn, cache_salt
from serve.query.retrieval import LocalSearcher, SearchFilter
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.unit

ACME = {
    "leave.txt": "Annual leave is 27 days per calendar year for every employee.",
    "pump.txt": "The pump needs oil every month and a new filter every year.",
}
GLOBEX = {"globex.txt": "Globex annual leave is 25 days per calendar year."}


@pytest.fixture
def service(fake_service):
    for tenant, files in (("acme", ACME), ("globex", GLOBEX)):
        sources = [SourceFile.from_bytes(t.encode(), n) for n, t in files.items()]
        list(fake_service.pipeline(tenant).ingest(sources))
    return fake_service


def run(pipeline: QueryPipeline, *args, **kwargs):
    return asyncio.run(pipeline.answer(*args, **kwargs))


def test_answer_cites_checked_sources_and_reports_usage(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1]. Also see [4].")
    answer = run(
        QueryPipeline(LocalSearcher(service), generator, QueryConfig()), "acme", "annual leave days"
    )
    assert not answer.abstained
    assert answer.text == "Annual leave is 27 days [1]. Also see."
    assert answer.invalid_citations_removed == 1
    assert [c.source.hit.file_name for c in answer.cited] == [answer.sources[0].hit.file_name]
    assert answer.cited[0].sentences == ("Annual leave is 27 days.",)
    assert answer.cited[0].support == 1.0  # annual, leave, 27, days are all in the chunk
    assert answer.usage.completion_tokens > 0 and answer.usage.prompt_tokens > 0
    assert generator.calls[0]["salt"] == cache_salt("acme")


def test_abstains_without_calling_the_generator_when_nothing_passes(service):
    generator = ScriptedGenerator("should not be used")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.9))
    answer = run(pipeline, "acme", "Quel est le prix du contrat de maintenance ?")
    assert answer.abstained and answer.text == NOT_FOUND["fr"]
    assert answer.sources == () and answer.cited == ()
    assert generator.calls == []


def test_prompt_holds_only_the_tenants_own_sources(service):
    generator = ScriptedGenerator("ok")
    answer = run(
        QueryPipeline(LocalSearcher(service), generator, QueryConfig()),
        "globex",
        "annual leave days",
    )
    assert {s.hit.file_name for s in answer.sources} == {"globex.txt"}
    system = generator.last_messages[0]["content"]
    assert "Globex annual leave" in system and "27 days" not in system


def test_history_is_passed_between_sources_and_question(service):
    generator = ScriptedGenerator("ok")
    history = [Turn("user", "hello there"), Turn("assistant", "hi")]
    run(
        QueryPipeline(LocalSearcher(service), generator, QueryConfig()), "acme", "pump oil", history
    )
    roles = [m["role"] for m in generator.last_messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert generator.last_messages[-1]["content"] == "pump oil"


def test_question_too_long_for_the_window_is_refused_with_numbers(service):
    generator = ScriptedGenerator("ok", max_model_len=200)
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    with pytest.raises(ContextLengthError, match="maximum context length is 200 tokens"):
        run(pipeline, "acme", "annual leave " * 100, max_tokens=50)


def test_sources_are_trimmed_to_fit_a_small_window(service):
    generator = ScriptedGenerator("ok", max_model_len=170)
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.0))
    answer = run(pipeline, "acme", "annual leave", max_tokens=20)
    assert 1 <= len(answer.sources) < 2
    assert generator.calls[0]["tokens"] + 20 <= 170


def test_no_room_for_a_single_source_is_refused_not_answered_blind(service):
    generator = ScriptedGenerator("ok", max_model_len=150)
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.0))
    with pytest.raises(ContextLengthError, match="with one source"):
        run(pipeline, "acme", "annual leave", max_tokens=20)
    assert generator.calls == []


def test_streamed_deltas_are_the_checked_answer_followed_by_the_answer(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1] [9].")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())

    async def collect():
        return [item async for item in pipeline.stream("acme", "annual leave days")]

    items = asyncio.run(collect())
    *deltas, answer = items
    assert isinstance(answer, Answer) and all(isinstance(d, str) for d in deltas)
    assert "".join(deltas).strip() == answer.text == "Annual leave is 27 days [1]."
    assert {"retrieve", "prompt", "first_token", "generate", "total"} <= set(answer.timings)


def test_options_narrow_the_search_but_never_widen_the_tenant(service):
    generator = ScriptedGenerator("ok")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.0))
    only_pump = QueryOptions(search_filter=SearchFilter(file_names=("pump.txt",)))
    answer = run(pipeline, "acme", "annual leave", options=only_pump)
    assert {s.hit.file_name for s in answer.sources} == {"pump.txt"}
    answer = run(pipeline, "acme", "annual leave", options=QueryOptions(top_k=1))
    assert len(answer.sources) == 1
    other = QueryOptions(search_filter=SearchFilter(file_names=("globex.txt",)))
    assert run(pipeline, "acme", "annual leave", options=other).abstained


def test_generator_reranker_reorders_and_can_be_turned_off_per_request(service):
    def judge(messages):  # the model says "yes" only for the pump passage
        return 0.9 if "pump needs oil" in messages[-1]["content"] else 0.1

    generator = ScriptedGenerator("ok", judge=judge)
    config = QueryConfig(min_dense_score=0.0, top_k=1, rerank=RerankConfig(backend="generator"))
    pipeline = QueryPipeline(LocalSearcher(service), generator, config)

    async def top(question, options=None):
        return await pipeline.retrieve("acme", question, options or QueryOptions())

    reranked = asyncio.run(top("annual leave"))
    assert [h.file_name for h in reranked] == ["pump.txt"]
    assert reranked[0].rerank_score == pytest.approx(0.9)
    plain = asyncio.run(top("annual leave", QueryOptions(rerank=False)))
    assert [h.file_name for h in plain] == ["leave.txt"] and plain[0].rerank_score is None


def test_follow_up_questions_retrieve_with_the_earlier_question(service):
    generator = ScriptedGenerator("ok")
    history = [Turn("user", "Does the pump need oil?"), Turn("assistant", "Yes, monthly.")]
    lexical = {"mode": "lexical", "min_dense_score": 0.0, "min_bm25_score": 0.0}
    recent = QueryPipeline(LocalSearcher(service), generator, QueryConfig(**lexical))
    alone = QueryPipeline(
        LocalSearcher(service), generator, QueryConfig(**lexical, condense="none")
    )
    follow_up = "how frequently then?"  # no word of any document
    assert {s.hit.file_name for s in run(recent, "acme", follow_up, history).sources} == {
        "pump.txt"
    }
    assert run(alone, "acme", follow_up, history).abstained
    assert generator.last_messages[-1]["content"] == follow_up  # the prompt keeps the question


def test_generator_condensation_retrieves_with_the_rewritten_question(service):
    generator = ScriptedGenerator("Does the pump need oil?")  # the rewrite the model returns
    config = QueryConfig(mode="lexical", min_bm25_score=0.0, condense="generator")
    history = [Turn("user", "Tell me about our machines."), Turn("assistant", "Which one?")]
    answer = run(
        QueryPipeline(LocalSearcher(service), generator, config),
        "acme",
        "what does it need?",
        history,
    )
    assert {s.hit.file_name for s in answer.sources} == {"pump.txt"}
    assert generator.calls[0]["max_tokens"] == 64  # the rewrite, then the answer
    assert len(generator.calls) == 2


def test_a_model_that_says_not_found_is_an_abstention_without_citations(service):
    generator = ScriptedGenerator("[1] Not found in the sources.")
    answer = run(
        QueryPipeline(LocalSearcher(service), generator, QueryConfig()), "acme", "annual leave days"
    )
    assert answer.abstained and answer.cited == () and answer.sources


def test_admission_sees_the_prompt_runs_the_generation_and_settles_the_usage(service):
    from contextlib import asynccontextmanager

    from serve.query.admission import Grant

    generator, seen, settled = ScriptedGenerator("Annual leave is 27 days [1]."), [], []

    async def preempt_once(start):
        """What fair admission does to a preempted generation: drop it before its first
        token and start it again, at another priority."""
        dropped = start(5, 0)
        await dropped.aclose()
        async for chunk in start(3, 1):
            yield chunk

    @asynccontextmanager
    async def admit(tokens, model):
        seen.append(tokens)
        grant = Grant(run=preempt_once)
        yield grant
        settled.append(grant.usage)

    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    answer = run(
        pipeline, "acme", "annual leave days", max_tokens=40, request_id="req-7", admit=admit
    )
    assert seen == [generator.calls[0]["tokens"] + 40]
    # the dropped stream never started; the restart has its own engine request id
    assert [(c["priority"], c["request_id"]) for c in generator.calls] == [(3, "req-7-1")]
    assert answer.text == "Annual leave is 27 days [1]."
    assert settled == [answer.usage] and answer.usage.completion_tokens > 0
    assert "admission" in answer.timings


def test_a_refused_admission_never_reaches_the_generator_and_the_gate_needs_none(service):
    from index.errors import RateLimitError

    def refuse(tokens, model):
        raise RateLimitError("over budget", reason="tokens_per_minute")

    generator = ScriptedGenerator("unused")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    with pytest.raises(RateLimitError, match="over budget"):
        run(pipeline, "acme", "annual leave days", admit=refuse)
    # nothing passes the gate: an abstention, not a generation, so admission is not asked
    strict = QueryPipeline(LocalSearcher(service), generator, QueryConfig(min_dense_score=0.9))
    assert run(strict, "acme", "annual leave days", admit=refuse).abstained
    assert generator.calls == []


def test_a_prompt_budget_trims_sources_and_names_itself_when_nothing_fits(service):
    generator = ScriptedGenerator("ok")  # a token per word: the counts below are exact
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    question = "annual leave days and the pump oil"
    assert len(run(pipeline, "acme", question, max_tokens=10).sources) == 2
    full = generator.calls[-1]["tokens"]
    capped = run(pipeline, "acme", question, max_tokens=10,
                 options=QueryOptions(max_prompt_tokens=150))  # fmt: skip
    assert len(capped.sources) == 1 and generator.calls[-1]["tokens"] <= 150 < full + 10
    with pytest.raises(ContextLengthError, match=r"your budget \(max_prompt_tokens 20 \+"):
        run(pipeline, "acme", question, max_tokens=10,
            options=QueryOptions(max_prompt_tokens=20))  # fmt: skip


class WordJudge:
    """A reranker that scores a passage by whether it holds a given word (a stand-in judge)."""

    def __init__(self, word: str) -> None:
        self.word = word

    async def scores(self, query, passages, cache_salt=""):
        return [5.0 if self.word in p else -5.0 for p in passages]


def judged(min_score: float, languages=None) -> QueryConfig:
    rerank = RerankConfig(backend="cross-encoder", model="unused", min_score=min_score,
                          languages=languages)  # fmt: skip
    return QueryConfig(min_dense_score=0.0, rerank=rerank)


def test_the_judge_gate_keeps_only_judged_sources_and_abstains_without_any(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1].")
    pipeline = QueryPipeline(LocalSearcher(service), generator, judged(0.0), WordJudge("27"))
    answer = run(pipeline, "acme", "annual leave days")
    assert [s.hit.file_name for s in answer.sources] == ["leave.txt"]  # the pump is dropped
    nothing = QueryPipeline(LocalSearcher(service), generator, judged(0.0), WordJudge("zebra"))
    calls = len(generator.calls)
    answer = run(nothing, "acme", "annual leave days")
    assert answer.abstained and answer.sources == () and len(generator.calls) == calls


def test_the_judge_applies_only_to_the_languages_it_was_measured_on(service):
    generator = ScriptedGenerator("Le congé annuel est de 27 jours [1].")
    english_only = judged(0.0, ["en"])
    pipeline = QueryPipeline(LocalSearcher(service), generator, english_only, WordJudge("zebra"))
    assert not run(pipeline, "acme", "Combien de jours de congé annuel par an ?").abstained
    assert run(pipeline, "acme", "How many days of annual leave per year?").abstained
    per_language = judged({"fr": 0.0})  # English questions are reranked but not gated
    pipeline = QueryPipeline(LocalSearcher(service), generator, per_language, WordJudge("zebra"))
    assert run(pipeline, "acme", "Combien de jours de congé annuel par an ?").abstained
    assert not run(pipeline, "acme", "How many days of annual leave per year?").abstained


def test_where_the_judge_gate_applies_the_similarity_gate_does_not(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1].")
    strict = {"min_dense_score": 0.9}  # on its own, turns every question away (above)
    both = judged({"en": 0.0}).model_copy(update=strict)
    pipeline = QueryPipeline(LocalSearcher(service), generator, both, WordJudge("27"))
    answer = run(pipeline, "acme", "How many days of annual leave per year?")
    assert [s.hit.file_name for s in answer.sources] == ["leave.txt"]  # the judge decided
    # no judge threshold for French: the similarity gate still guards those questions
    assert run(pipeline, "acme", "Combien de jours de congé annuel par an ?").abstained
    unranked = QueryOptions(rerank=False)  # a request that turns the judge off
    assert run(pipeline, "acme", "How many days of annual leave per year?",
               options=unranked).abstained  # fmt: skip


def test_rules_are_restated_after_the_question_when_enabled(service):
    from serve.query.prompt import REMINDER

    generator = ScriptedGenerator("ok")  # a token per word
    plain = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    run(plain, "acme", "pump oil", max_tokens=10)
    without = generator.calls[-1]["tokens"]
    reminded = QueryPipeline(LocalSearcher(service), generator, QueryConfig(remind_rules=True))
    run(reminded, "acme", "pump oil", max_tokens=10)
    assert generator.last_messages[-1]["content"].startswith("pump oil\n\nAnswer the question")
    assert generator.calls[-1]["tokens"] >= without + len(REMINDER.split()) - 5


def test_leading_whitespace_is_not_streamed_and_the_start_is_marked(service):
    generator = ScriptedGenerator("\n\n  Annual leave is 27 days [1].")

    async def deltas():
        pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
        return [d async for d in pipeline.stream("acme", "annual leave days")]

    *streamed, answer = asyncio.run(deltas())
    assert "".join(streamed) == answer.text == "Annual leave is 27 days [1]."
    assert streamed[0] == ""  # the first token was only whitespace: the start is marked


class PartJudge:
    """Scores high the passage about the query's last subject: a stand-in for the judge, which
    reads a compound question for its second half ("... et sa durée ?")."""

    async def scores(self, query, passages, cache_salt=""):
        subjects = {"the leave": "27 days", "the pump": "oil"}
        last = max((query.rfind(s), text) for s, text in subjects.items())[1]
        return [5.0 if last in p else -5.0 for p in passages]


def test_a_two_part_question_keeps_each_parts_passage_and_may_quote_both(service):
    generator = ScriptedGenerator('{"source": 0, "quote": "", "answer": ""}')
    config = judged(0.0).model_copy(update={"answer_format": "quoted"})
    pipeline = QueryPipeline(LocalSearcher(service), generator, config, PartJudge())
    run(pipeline, "acme", "How long is the leave, and what does the pump need?")
    [call] = generator.calls
    assert "$defs" in call["json_schema"]  # a second quote is allowed
    assert "asks for two things" in generator.last_messages[-1]["content"]
    prompt = generator.last_messages[0]["content"]
    assert ACME["leave.txt"] in prompt and ACME["pump.txt"] in prompt  # each part's passage
    one = QueryPipeline(LocalSearcher(service), ScriptedGenerator(), config, PartJudge())
    assert run(one, "acme", "How long is the leave?").sources  # one part: its own passage
    assert "$defs" not in one.generator.calls[0]["json_schema"]


def test_a_small_max_tokens_is_the_answers_and_its_quote_is_reserved_on_top(service):
    reply = '{"source": 1, "quote": "Annual leave is 27 days per calendar year for every' \
            ' employee.", "answer": "27 days a year"}'  # fmt: skip
    generator = ScriptedGenerator(reply)
    config = QueryConfig(answer_format="quoted", min_dense_score=0.0)
    answer = run(QueryPipeline(LocalSearcher(service), generator, config), "acme",
                 "annual leave days", max_tokens=4)  # fmt: skip
    # Four tokens would not reach the answer after the quote; the engine is given the quote's
    # room too, and the client gets the answer.
    assert generator.calls[0]["max_tokens"] >= 4 + generator.count(json.dumps(ACME["leave.txt"]))
    assert answer.text.startswith("27 days a year") and not answer.abstained
