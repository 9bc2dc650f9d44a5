"""The Responses API's wire objects and events, held to the openai package's own types (and
its streaming accumulator, which refuses an event sequence it cannot follow)."""

from __future__ import annotations

import asyncio
import json

import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from index.errors import InvalidRequestError
from serve.http.responses import ResponseRequest, ResponseShape, conversation, response_events
from serve.query.generation import GeneratorUnavailableError
from serve.query.prompt import Turn
from tests.openai_schema import conforms
from tests.openai_spec import spec_conforms
from tests.unit.serve.test_api import answer

pytestmark = pytest.mark.unit

QUESTION = "How many days of annual leave?"
TOOL = {"type": "file_search", "vector_store_ids": ["vs_1"]}


def request(**fields) -> ResponseRequest:
    return ResponseRequest.model_validate({"model": "grounded", "input": QUESTION, **fields})


def shape(**fields) -> ResponseShape:
    body = request(**fields)
    return ResponseShape("resp_1", 1700000000, body, "fs_1" if body.tools else None)


def test_a_completed_response_conforms_with_file_citations_and_cached_tokens():
    body = shape(tools=[TOOL], include=["file_search_call.results"]).completed(
        QUESTION, answer(), {"doc-1": {"site": "lyon"}}, {"amount": 0.0, "currency": "USD"}
    )
    response = conforms(Response, json.loads(json.dumps(body)))
    spec_conforms("POST /responses", json.loads(json.dumps(body)))
    search, message = response.output
    assert search.type == "file_search_call" and search.queries == [QUESTION]
    assert search.results[0].file_id == "doc-1" and search.results[0].attributes == {"site": "lyon"}
    [citation] = message.content[0].annotations
    text = message.content[0].text
    assert citation.type == "file_citation" and citation.file_id == "doc-1"
    assert citation.index == len(text)  # at the end of the one citing sentence
    assert response.usage.input_tokens_details.cached_tokens == 64
    assert response.output_text == text


def test_results_only_when_included_and_no_search_item_without_the_tool():
    [search, _] = shape(tools=[TOOL]).completed(QUESTION, answer(), {})["output"]
    assert search["results"] is None
    [message] = shape().completed(QUESTION, answer(), {})["output"]
    assert message["type"] == "message"


def test_an_answer_cut_by_max_output_tokens_is_incomplete():
    cut = answer()
    cut = type(cut)(**{**{f: getattr(cut, f) for f in cut.__slots__}, "finish_reason": "length"})
    body = shape().completed(QUESTION, cut, {})
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}


def test_null_is_not_given_as_in_openais_api():
    """LlamaIndex's OpenAIResponses sends ``include``, ``instructions``... as null."""
    body = request(include=None, store=None, stream=None, instructions=None, user=None)
    assert (body.include, body.store, body.stream) == ([], True, False)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"tools": [{"type": "function", "name": "f"}]}, "function are not supported"),
        ({"tools": [TOOL, TOOL]}, "at most one file_search"),
        ({"include": ["message.output_text.logprobs"]}, "only 'file_search_call.results'"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format 'json_schema'"),
        ({"text": {"format": True}}, "text.format must be an object"),
        ({"max_output_tokens": 0}, "greater than 0"),
    ],
)
def test_unsupported_features_are_refused_with_what_to_do(fields, says):
    with pytest.raises(pydantic.ValidationError, match=says):
        request(**fields)


def test_the_question_is_the_last_user_message_and_earlier_turns_are_history():
    items = [
        {"type": "message", "role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Leave?"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "27 days."}]},
        {"type": "file_search_call", "id": "fs_0", "queries": ["Leave?"], "status": "completed"},
        {"role": "user", "content": "And carry-over?"},
    ]  # fmt: skip
    question, turns = conversation(items)
    assert question == "And carry-over?"
    assert turns == [Turn("user", "Leave?"), Turn("assistant", "27 days.")]


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ([{"role": "assistant", "content": "Hi"}], "must end with the user's question"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
         "input_image' is not supported"),
        ([{"type": "function_call_output", "call_id": "c", "output": "x"}],
         "function_call_output' are not supported"),
        ([{"role": "user", "content": 5}], "must be a string or a list of text parts"),
        ([{"role": "user", "content": [{"type": "input_text", "text": None}]}],
         "must be a string, not NoneType"),
    ],
)  # fmt: skip
def test_bad_input_is_refused(items, says):
    with pytest.raises(InvalidRequestError, match=says):
        conversation(items)


async def _stream(items, failure: Exception | None = None):
    for item in items:
        yield item
    if failure is not None:
        raise failure


def run(response_shape: ResponseShape, deltas, final=None, failure=None) -> tuple[list, list]:
    ended = []

    async def finish(done):
        return response_shape.completed(QUESTION, done, {})

    async def on_end(done):
        ended.append(done)

    async def collect():
        items = [*deltas, *([final] if final else [])]
        stream = _stream(items[1:], failure)
        events = response_events(response_shape, QUESTION, items[0], stream, finish=finish,
                                 on_end=on_end)  # fmt: skip
        return [e async for e in events]

    return asyncio.run(collect()), ended


def parsed(raw: list[str]) -> list:
    events = []
    for text in raw:
        name, data = text.strip().split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        spec_conforms("POST /responses", payload, stream=True)  # OpenAI's published spec
        events.append(pydantic.TypeAdapter(ResponseStreamEvent).validate_python(payload))
    return events


def test_the_stream_is_a_sequence_the_sdk_accumulates_into_the_final_response():
    done = answer()
    deltas = ["", done.text[:10], done.text[10:]]
    raw, ended = run(shape(tools=[TOOL]), deltas, done)
    events = parsed(raw)
    state = ResponseStreamState(input_tools=[], text_format=omit)
    for e in events:
        state.handle_event(e)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.index("response.file_search_call.completed") < kinds.index(
        "response.output_text.delta"
    )
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == done.text
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == done.text
    [added] = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert added.annotation.file_id == "doc-1"
    assert ended == [done]


def test_a_failure_midway_is_an_error_event_and_response_failed():
    raw, ended = run(shape(), ["", "Every "], failure=RuntimeError("replica died"))
    events = parsed(raw)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "stopped before it was complete" in events[-2].message
    assert events[-1].response.status == "failed"
    assert ended == [None]


def test_a_refusal_midway_keeps_its_own_message():
    refusal = GeneratorUnavailableError("the generator is starting; retry in a few seconds")
    raw, _ = run(shape(), ["", "Every "], failure=refusal)
    error = parsed(raw)[-2]
    assert error.type == "error" and error.message == str(refusal)
