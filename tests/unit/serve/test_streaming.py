import asyncio
import json

import pytest

from index.errors import RateLimitError
from serve.http.streaming import chat_events
from serve.query.pipeline import Answer

pytestmark = pytest.mark.unit


async def pipeline(items, failure: Exception | None = None):
    for item in items:
        yield item
    if failure is not None:
        raise failure


def run(items, failure=None) -> tuple[list, list]:
    ended = []

    async def final_chunks(answer):
        return [{"final": answer.text}]

    async def on_end(answer):
        ended.append(answer)

    async def collect():
        stream = pipeline(items[1:], failure)
        return [e async for e in chat_events(items[0], stream, request_id="chatcmpl-1",
                                             created=0, final_chunks=final_chunks,
                                             on_end=on_end)]  # fmt: skip

    events = asyncio.run(collect())
    payloads = [e.removeprefix("data: ").strip() for e in events]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads], ended


def test_a_complete_stream_ends_with_the_final_chunks_and_done():
    answer = Answer("Leave is 27 days.", (), (), False)
    events, ended = run(["Leave ", "is 27 days.", answer])
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["choices"][0]["delta"]["content"] for e in events[1:3]] == ["Leave ", "is 27 days."]
    assert events[3] == {"final": "Leave is 27 days."} and events[4] == "[DONE]"
    assert ended == [answer]


def test_a_component_failure_mid_stream_is_an_error_event_not_a_silent_stop():
    events, ended = run(["The standard"], RuntimeError("the Generator replica died"))
    assert events[1]["choices"][0]["delta"]["content"] == "The standard"
    error = events[-1]["error"]
    assert error["type"] == "service_unavailable" and "chatcmpl-1" in error["message"]
    assert "[DONE]" not in events and ended == [None]  # usage settled without an answer


def test_a_refusal_mid_stream_keeps_its_own_error():
    events, _ = run(["x"], RateLimitError("over the budget", retry_after=3))
    assert events[-1]["error"]["type"] == "rate_limit_exceeded"


def test_an_empty_delta_only_marks_the_start_and_sends_no_content_chunk():
    answer = Answer("Leave.", (), (), False)
    events, _ = run(["", "Leave.", answer])
    assert [e["choices"][0]["delta"] for e in events[:2]] == [
        {"role": "assistant", "content": ""}, {"content": "Leave."}]  # fmt: skip
