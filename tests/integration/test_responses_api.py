"""The Responses API and vector stores through the official openai SDK (sync and async), on
the real appliance serving two generators (generator.models: two deployments of the tiny model,
routed between). The tiny model writes noise: these tests check the mechanics, the objects,
tenant isolation and the routing, never wording."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import openai
import pytest

from serve.config import load_config
from serve.identity.keys import KeyStore
from tests.appliances import serving_handbook, tiny_appliance_config
from tests.conftest import CORPUS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = "How many days of annual leave do employees get?"
LARGE_PRICES = {"prompt_per_million": 1.0, "completion_per_million": 1000.0}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The appliance with upload_wait_s 0: every upload is answered at once as "uploaded" and
    ingested in the background, the path a large file takes (the SDK's *_and_poll helpers
    wait for it)."""
    config = tiny_appliance_config(tmp_path_factory.mktemp("responses"))
    tiny = {"model": config.generator.model, "deployment": {"num_cpus": 0.1}}
    generator = config.generator.model_dump()
    generator["models"] = {"small": tiny, "large": {**tiny, "prices": LARGE_PRICES}}
    config = load_config(
        None,
        **{
            **config.model_dump(),
            "generator": generator,
            "serve": {**config.serve.model_dump(), "upload_wait_s": 0.0},
        },
    )
    _, other = KeyStore(config.data_dir).create("globex", ["query", "ingest"])
    with serving_handbook(config, "acme") as (running, secret, client):
        outsider = openai.OpenAI(base_url=running.api_url, api_key=other, max_retries=0)
        yield client, outsider, running, secret, config


@pytest.fixture(scope="module")
def store(served):
    """A vector store with the handbook (attributes dept=hr, year=2024) and the GX-4200 FAQ
    uploaded into it with upload_and_poll (dept=support)."""
    client = served[0]
    created = client.vector_stores.create(name="policies", metadata={"owner": "hr"})
    [handbook] = [f for f in client.files.list().data if f.filename == "handbook.md"]
    attached = client.vector_stores.files.create_and_poll(
        file_id=handbook.id, vector_store_id=created.id, attributes={"dept": "hr", "year": 2024}
    )
    assert attached.status == "completed"
    faq = (CORPUS / "acme" / "gx-4200-faq.html").read_bytes()
    uploaded = client.vector_stores.files.upload_and_poll(
        vector_store_id=created.id, file=("gx-4200-faq.html", faq)
    )
    assert uploaded.status == "completed"
    client.vector_stores.files.update(
        uploaded.id, vector_store_id=created.id, attributes={"dept": "support", "year": 2023}
    )
    return created.id, handbook.id, uploaded.id


def test_a_vector_store_counts_lists_and_filters_its_files(served, store):
    client = served[0]
    store_id, handbook, faq = store
    found = client.vector_stores.retrieve(store_id)
    assert found.name == "policies" and found.metadata == {"owner": "hr"}
    assert found.file_counts.completed == found.file_counts.total == 2
    assert found.usage_bytes > 0 and found.status == "completed"
    listed = client.vector_stores.files.list(store_id, filter="completed")
    assert {f.id for f in listed.data} == {handbook, faq}
    member = client.vector_stores.files.retrieve(faq, vector_store_id=store_id)
    assert member.attributes == {"dept": "support", "year": 2023}
    hr_only = client.vector_stores.search(
        store_id, query="annual leave", filters={"type": "eq", "key": "dept", "value": "hr"}
    )
    assert hr_only.data and {r.file_id for r in hr_only.data} == {handbook}
    recent = client.vector_stores.search(
        store_id, query="controller", filters={"type": "and", "filters": [
            {"type": "gte", "key": "year", "value": 2024},
            {"type": "eq", "key": "dept", "value": "support"}]},
    )  # fmt: skip
    assert recent.data == []
    content = client.vector_stores.files.content(handbook, vector_store_id=store_id)
    assert "annual leave" in "".join(part.text for part in content).lower()


def test_stores_paginate_with_cursors_and_batches_complete(served):
    client = served[0]
    made = [client.vector_stores.create(name=f"project-{i}").id for i in range(3)]
    first = client.vector_stores.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    everything = [s.id for s in client.vector_stores.list(limit=2)]  # the SDK follows `after`
    assert set(made) <= set(everything) and len(everything) == len(set(everything))
    notes = [("note-a.md", b"# Note A\n\nThe canteen opens at 8."),
             ("note-b.md", b"# Note B\n\nParking is behind building C.")]  # fmt: skip
    batch = client.vector_stores.file_batches.upload_and_poll(made[0], files=notes)
    assert batch.status == "completed" and batch.file_counts.completed == 2
    in_batch = client.vector_stores.file_batches.list_files(batch.id, vector_store_id=made[0])
    assert len(in_batch.data) == 2
    deleted = client.vector_stores.delete(made[1])
    assert deleted.deleted
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(made[1])
    assert client.vector_stores.files.list(made[0]).data  # the files stay where they are


def test_a_response_searches_the_store_cites_and_is_stored(served, store):
    client, _, _, _, config = served
    store_id, handbook, _ = store
    before = answered(config)
    response = client.responses.create(
        model="grounded", input=QUESTION, include=["file_search_call.results"],
        tools=[{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 3,
                "filters": {"type": "eq", "key": "dept", "value": "hr"}}],
    )  # fmt: skip
    search, message = response.output
    assert search.type == "file_search_call" and search.queries == [QUESTION]
    assert search.results and {r.file_id for r in search.results} == {handbook}
    assert message.type == "message" and response.output_text == message.content[0].text
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert answered(config) == before + 1, "accounted in the usage ledger like a chat answer"
    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text
    [item] = client.responses.input_items.list(response.id).data
    assert item.role == "user" and item.content[0].text == QUESTION
    follow_up = client.responses.create(
        model="grounded", input="And how many can be carried over?",
        previous_response_id=response.id,
    )  # fmt: skip
    assert follow_up.previous_response_id == response.id
    assert [o.type for o in follow_up.output] == ["message"]  # no tool: the whole tenant
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="grounded", input="Hi?", previous_response_id=response.id)


def test_a_streamed_response_gives_the_sdk_its_events_and_final_response(served, store):
    """The tiny model rarely stops before max_output_tokens: its stream ends with OpenAI's
    ``response.incomplete`` (reason max_output_tokens), which the SDK accumulates like
    ``response.completed`` (its get_final_response() only accepts the latter)."""
    client = served[0]
    tool = {"type": "file_search", "vector_store_ids": [store[0]]}
    with client.responses.stream(model="grounded", input=QUESTION, tools=[tool]) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert kinds[0] == "response.created"
    assert "response.file_search_call.completed" in kinds
    final = events[-1].response
    if kinds[-1] == "response.incomplete":
        assert final.incomplete_details.reason == "max_output_tokens"
    else:
        assert kinds[-1] == "response.completed"
        assert stream.get_final_response().output_text == text
    assert final.output_text == text and final.usage.total_tokens > 0
    assert client.responses.retrieve(final.id).output_text == text


def test_the_async_client_creates_and_retrieves_responses(served):
    _, _, running, secret, _ = served

    async def work():
        async with openai.AsyncOpenAI(base_url=running.api_url, api_key=secret,
                                      max_retries=0) as client:  # fmt: skip
            created = await client.responses.create(model="grounded", input=QUESTION)
            return created, await client.responses.retrieve(created.id)

    created, found = asyncio.run(work())
    assert found.id == created.id and found.output_text == created.output_text


def test_another_tenants_stores_files_and_responses_are_absent(served, store):
    client, outsider = served[0], served[1]
    store_id, handbook, _ = store
    response = client.responses.create(model="grounded", input=QUESTION, store=True)
    calls = [
        lambda: outsider.vector_stores.retrieve(store_id),
        lambda: outsider.vector_stores.files.list(store_id),
        lambda: outsider.vector_stores.files.retrieve(handbook, vector_store_id=store_id),
        lambda: outsider.vector_stores.search(store_id, query="leave"),
        lambda: outsider.vector_stores.files.create(store_id, file_id=handbook),
        lambda: outsider.responses.retrieve(response.id),
        lambda: outsider.responses.delete(response.id),
        lambda: outsider.responses.create(
            model="grounded",
            input=QUESTION,
            tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        ),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as absent:
            call()
        assert "acme" not in str(absent.value)
    assert client.responses.retrieve(response.id).id == response.id  # still there


def test_unsupported_features_are_clear_400s(served):
    client = served[0]
    with pytest.raises(openai.BadRequestError, match="function are not supported"):
        function = {"type": "function", "name": "f", "parameters": {}}
        client.responses.create(model="grounded", input=QUESTION, tools=[function])
    with pytest.raises(openai.BadRequestError, match="input_image"):
        client.responses.create(model="grounded", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/x.png"}]}])  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="chunked once"):
        client.vector_stores.create(name="x", chunking_strategy={"type": "static", "static": {
            "max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}})  # fmt: skip


def answered(config) -> int:
    """Requests the usage ledger recorded with an answer (or a "not found")."""
    with sqlite3.connect(config.data_dir / "usage.sqlite") as db:
        query = "SELECT count(*) FROM requests WHERE outcome IN ('answered', 'abstained')"
        return db.execute(query).fetchone()[0]


def test_an_upload_answered_before_its_ingestion_ends_is_polled_to_processed(served):
    client = served[0]
    text = b"# Parking\n\nPermits cost 35 euros per month and renew on the 1st."
    created = client.files.create(file=("parking.md", text), purpose="assistants")
    assert created.status == "uploaded"  # upload_wait_s 0: answered at once
    assert client.files.content(created.id).content == text  # kept before it is ingested
    deadline = time.monotonic() + 120
    while (found := client.files.retrieve(created.id)).status == "uploaded":
        assert time.monotonic() < deadline, "never processed"
        time.sleep(0.5)
    assert found.status == "processed" and found.bytes == len(text)
    assert client.files.content(created.id).content == text  # the original, as uploaded
    stored = client.files.content(created.id, extra_query={"format": "text"}).text
    assert "35 euros" in stored
    refused = client.files.create(file=("scan.pdf", b"%PDF-1.4 not really"), purpose="assistants")
    while (found := client.files.retrieve(refused.id)).status == "uploaded":
        time.sleep(0.5)
    assert found.status == "error" and found.status_details  # the reason, kept
    store = client.vector_stores.create(name="scans", file_ids=[refused.id])
    member = client.vector_stores.files.retrieve(refused.id, vector_store_id=store.id)
    assert member.status == "failed" and member.last_error.message == found.status_details
    client.files.delete(refused.id)
    assert refused.id not in {f.id for f in client.files.list().data}


def test_two_generators_are_listed_asked_by_name_and_metered_by_model(served):
    """Each model of generator.models is its own deployment: GET /v1/models lists them after
    the routing name, a request naming one is answered by it (its name in the response, its
    prices in the cost), an unknown name is OpenAI's 404, and Prometheus carries the model."""
    import re
    import urllib.request

    client, _, running, _, _ = served
    assert [m.id for m in client.models.list().data][:3] == ["grounded", "small", "large"]
    asked = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8}
    large = client.chat.completions.create(model="large", **asked)
    extension = large.model_extra["grounded"]
    assert large.model == "large" and extension["route"]["model"] == "large"
    assert extension["route"]["decision"] == "asked"
    if large.usage.completion_tokens:  # large's own prices: 1000 per million completion tokens
        assert extension["cost"]["amount"] >= large.usage.completion_tokens * 1000.0 / 1e6
    routed = client.chat.completions.create(model="grounded", **asked).model_extra["grounded"]
    assert routed["route"]["decision"] in ("routed", "cascaded")
    assert routed["route"]["model"] in ("small", "large")
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="huge", **asked)
    assert refused.value.body["code"] == "model_not_found"
    assert "'small', 'large'" in refused.value.body["message"]
    deadline = time.monotonic() + 60
    while True:  # Ray's metrics agent exports every few seconds
        with urllib.request.urlopen(running.metrics_url, timeout=10) as response:
            text = response.read().decode()
        series = set(re.findall(r'grounded_vllm_kv_cache_usage\{[^}]*model="(\w+)"', text))
        routes = re.findall(r'grounded_routes_total\{[^}]*model="large"', text)
        if (series == {"small", "large"} and routes) or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert series == {"small", "large"} and routes
