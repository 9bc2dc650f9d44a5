import asyncio

import pytest

from index.pipeline import SourceFile
from serve.query.budget import ContextLengthError
from serve.query.gate import NOT_FOUND
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.prompt import Turn, cache_salt
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
    answer = run(QueryPipeline(service, generator, QueryConfig()), "acme", "annual leave days")
    assert not answer.abstained
    assert answer.text == "Annual leave is 27 days [1]. Also see."
    assert answer.invalid_citations_removed == 1
    assert [s.hit.file_name for s in answer.cited] == [answer.sources[0].hit.file_name]
    assert answer.usage.completion_tokens > 0 and answer.usage.prompt_tokens > 0
    assert generator.calls[0]["salt"] == cache_salt("acme")


def test_abstains_without_calling_the_generator_when_nothing_passes(service):
    generator = ScriptedGenerator("should not be used")
    pipeline = QueryPipeline(service, generator, QueryConfig(min_dense_score=0.9))
    answer = run(pipeline, "acme", "Quel est le prix du contrat de maintenance ?")
    assert answer.abstained and answer.text == NOT_FOUND["fr"]
    assert answer.sources == () and answer.cited == ()
    assert generator.calls == []


def test_prompt_holds_only_the_tenants_own_sources(service):
    generator = ScriptedGenerator("ok")
    answer = run(QueryPipeline(service, generator, QueryConfig()), "globex", "annual leave days")
    assert {s.hit.file_name for s in answer.sources} == {"globex.txt"}
    system = generator.last_messages[0]["content"]
    assert "Globex annual leave" in system and "27 days" not in system


def test_history_is_passed_between_sources_and_question(service):
    generator = ScriptedGenerator("ok")
    history = [Turn("user", "hello there"), Turn("assistant", "hi")]
    run(QueryPipeline(service, generator, QueryConfig()), "acme", "pump oil", history)
    roles = [m["role"] for m in generator.last_messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert generator.last_messages[-1]["content"] == "pump oil"


def test_question_too_long_for_the_window_is_refused_with_numbers(service):
    generator = ScriptedGenerator("ok", max_model_len=200)
    pipeline = QueryPipeline(service, generator, QueryConfig())
    with pytest.raises(ContextLengthError, match="maximum context length is 200 tokens"):
        run(pipeline, "acme", "annual leave " * 100, max_tokens=50)


def test_sources_are_trimmed_to_fit_a_small_window(service):
    generator = ScriptedGenerator("ok", max_model_len=170)
    pipeline = QueryPipeline(service, generator, QueryConfig(min_dense_score=0.0))
    answer = run(pipeline, "acme", "annual leave", max_tokens=20)
    assert 1 <= len(answer.sources) < 2
    assert generator.calls[0]["tokens"] + 20 <= 170


def test_no_room_for_a_single_source_is_refused_not_answered_blind(service):
    generator = ScriptedGenerator("ok", max_model_len=150)
    pipeline = QueryPipeline(service, generator, QueryConfig(min_dense_score=0.0))
    with pytest.raises(ContextLengthError, match="with one source"):
        run(pipeline, "acme", "annual leave", max_tokens=20)
    assert generator.calls == []
