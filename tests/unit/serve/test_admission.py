import asyncio
import json
from contextlib import asynccontextmanager

import pytest

from index.errors import RateLimitError
from index.pipeline import SourceFile
from serve.query.admission import Grant
from serve.query.judging import RerankConfig
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.prompt import Turn
from serve.query.quotes import REPLY_FRAME_TOKENS
from serve.query.retrieval import LocalSearcher
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.unit

ACME = {
    "leave.txt": "Annual leave is 27 days per calendar year for every employee.",
    "pump.txt": "The pump needs oil every month and a new filter every year.",
}


@pytest.fixture
def service(fake_service):
    sources = [SourceFile.from_bytes(t.encode(), n) for n, t in ACME.items()]
    list(fake_service.pipeline("acme").ingest(sources))
    return fake_service


class Recorder:
    """An admission that records each reservation and what was settled."""

    def __init__(self, refuse_at: int | None = None) -> None:
        self.reserved: list[int] = []
        self.settled: list[int] = []
        self.refuse_at = refuse_at

    @asynccontextmanager
    async def __call__(self, tokens: int, model: str):
        if len(self.reserved) == self.refuse_at:
            raise RateLimitError("over budget", reason="tokens_per_minute")
        self.reserved.append(tokens)
        grant = Grant()
        try:
            yield grant
        finally:
            self.settled.append(grant.usage.prompt_tokens + grant.usage.completion_tokens)


def test_a_generator_rewrite_of_the_question_is_admitted_before_the_answer(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1].")
    config = QueryConfig(condense="generator", min_dense_score=0.0)
    admit = Recorder()
    history = [Turn("user", "tell me about leave"), Turn("assistant", "sure")]
    pipeline = QueryPipeline(LocalSearcher(service), generator, config)
    result = asyncio.run(
        pipeline.answer("acme", "how many days?", history, max_tokens=30, admit=admit)
    )
    rewrite, answer = generator.calls
    assert admit.reserved == [rewrite["tokens"] + 64, answer["tokens"] + 30]
    generated = result.usage.completion_tokens  # the scripted reply, both times
    assert admit.settled == [rewrite["tokens"] + generated, answer["tokens"] + generated]


def test_a_refused_rewrite_stops_the_request_before_any_generation(service):
    generator = ScriptedGenerator("unused")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig(condense="generator"))
    history = [Turn("user", "tell me about leave"), Turn("assistant", "sure")]
    with pytest.raises(RateLimitError):
        asyncio.run(pipeline.answer("acme", "how many?", history, admit=Recorder(refuse_at=0)))
    assert generator.calls == []


def test_the_generator_reranker_is_admitted_once_for_all_its_judgements(service):
    judged = []

    def judge(messages):
        judged.append(messages)
        return 0.9 if "pump" in messages[-1]["content"] else 0.1

    generator = ScriptedGenerator("ok", judge=judge)
    config = QueryConfig(min_dense_score=0.0, rerank=RerankConfig(backend="generator"))
    pipeline = QueryPipeline(LocalSearcher(service), generator, config)
    admit = Recorder()
    hits = asyncio.run(pipeline.retrieve("acme", "annual leave", admit=admit))
    assert hits[0].file_name == "pump.txt"
    prompts = sum(len(generator.render(m)) for m in judged)
    assert len(judged) == 2
    assert admit.reserved == [prompts + 2] and admit.settled == [prompts + 2]


def test_the_cross_encoder_and_a_request_without_admission_need_none(service):
    generator = ScriptedGenerator("Annual leave is 27 days [1].")
    pipeline = QueryPipeline(LocalSearcher(service), generator, QueryConfig())
    answer = asyncio.run(pipeline.answer("acme", "annual leave days"))
    assert not answer.abstained and len(generator.calls) == 1


def test_the_answer_check_is_reserved_and_billed_with_the_answer(service):
    seen = []

    def judge(messages):
        seen.append(messages)
        return 0.9

    probe = QueryPipeline(LocalSearcher(service), ScriptedGenerator(), QueryConfig())
    number = next(s.number for s in asyncio.run(probe.answer("acme", "annual leave days")).sources
                  if s.hit.file_name == "leave.txt")  # fmt: skip
    reply = json.dumps({"source": number, "quote": ACME["leave.txt"], "answer": "27 days a year."})
    generator = ScriptedGenerator(reply, judge=judge)
    config = QueryConfig(answer_format="quoted", min_answer_support=0.5)
    pipeline = QueryPipeline(LocalSearcher(service), generator, config)
    admit = Recorder()
    answer = asyncio.run(pipeline.answer("acme", "annual leave days", max_tokens=60, admit=admit))
    assert not answer.abstained and answer.answer_support == pytest.approx(0.9)
    (call,) = generator.calls
    (checked,) = seen
    check_prompt = len(generator.render(checked))
    generated = answer.usage.completion_tokens - 1  # the reply; the check reads one token
    assert answer.usage.prompt_tokens == call["tokens"] + check_prompt  # reported and recorded
    assert admit.settled == [call["tokens"] + generated + check_prompt + 1]
    # Reserved: the answer's prompt and max_tokens with its quote's reservation, and the check
    # with the longest source and room for that reply, and its token.
    reply = call["max_tokens"]
    assert reply > 60 + REPLY_FRAME_TOKENS  # the quote is reserved on top of max_tokens
    check = pipeline.answer_check
    longest = max(len(generator.render(check.messages("annual leave days", "", s)))
                  for s in answer.sources)  # fmt: skip
    assert admit.reserved == [call["tokens"] + reply + longest + reply + 1]
    assert admit.reserved[0] >= admit.settled[0]
