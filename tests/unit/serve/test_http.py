"""The HTTP layer in-process: serve/http/app.py's create_app over a real Gateway (keys, budgets,
fair admission, accounting, the query pipeline) and the real ShardHost (serve/shards/host.py,
over an IndexService with the hashing embedder, behind TenantShards as the appliance calls
it), with a scripted generator. Every route module is driven through FastAPI's TestClient,
without Ray or vLLM; the integration tests keep the real stack where the stack is what they
test."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.errors import GroundedError
from index.service import IndexService
from index.testing import HashingEmbedder
from serve.config import load_config
from serve.http.app import create_app
from serve.http.gateway import Gateway
from serve.http.guard import JSON_BODY_LIMIT, RequestGuard
from serve.identity.keys import KeyStore
from serve.identity.oidc import Authenticator, OidcConfig
from serve.query.generation import GeneratorUnavailableError
from serve.query.pipeline import QueryPipeline
from serve.query.retrieval import LocalSearcher
from serve.shards.host import ShardHost
from serve.shards.tenant import TenantShards
from serve.testing import LocalShards, ScriptedGenerator

pytestmark = pytest.mark.unit

LEAVE = b"Annual leave is 27 days per calendar year for every employee."
REPLY = "Annual leave is 27 days per calendar year [1]."
ASKED = "How many days of annual leave?"
QUESTION = {"model": "grounded", "messages": [{"role": "user", "content": ASKED}]}


class FailingGenerator(ScriptedGenerator):
    """Streams the first words of its reply, then its engine fails."""

    async def stream(self, token_ids, **kwargs):
        count = 0
        async for chunk in super().stream(token_ids, **kwargs):
            if count == 3:
                raise RuntimeError("the engine died")
            count += 1
            yield chunk


@pytest.fixture
def world(tmp_path):
    """(app factory, secrets by name); ``initech`` may use 400 tokens a minute."""
    overrides = {
        "data_dir": str(tmp_path / "data"),
        "budgets": {"tenants": {"initech": {"tokens_per_minute": 400}}},
        "query": {"min_dense_score": 0.0},  # the hashing embedder's cosines are no relevance
    }
    config = load_config(None, **overrides)
    service = IndexService(config.index, config.data_dir, embedder=HashingEmbedder()).start()
    keys = KeyStore(config.data_dir)
    secrets = {
        "acme": keys.create("acme", ["query", "ingest"])[1],
        "acme-read": keys.create("acme", ["query"])[1],
        "globex": keys.create("globex", ["query", "ingest"])[1],
        "initech": keys.create("initech", ["query", "ingest"])[1],
        "acme-hr": keys.create("acme", ["query"], user="hana", groups=["hr"])[1],
        "acme-hr-editor": keys.create("acme", ["query", "ingest"], user="hana", groups=["hr"])[1],
        "acme-eng": keys.create("acme", ["query", "ingest"], user="eli", groups=["eng"])[1],
        "acme-admin": keys.create("acme", ["admin"])[1],
    }
    for tenant in ("acme", "globex", "initech"):  # the Shards deployment opens them on first use
        service.shard(tenant, create=True)
    embedder = HashingEmbedder()

    async def embed(texts: list[str]) -> tuple[np.ndarray, int]:
        return embedder.embed_documents(texts), sum(len(t.split()) for t in texts)

    def build(generator=None, oidc=None, models=None, **sections) -> TestClient:
        """``models``: several generators by name (generator.models; large priced apart);
        ``sections``: more config (with ``models``)."""
        settings = config
        if models:
            entries = {name: {"model": name} for name in models}
            entries["large"]["prices"] = {"completion_per_million": 1000.0}
            sections = {**sections, "generator": {"models": entries}}
        if sections:
            settings = load_config(None, **{**overrides, **sections})
        generator = models or generator or ScriptedGenerator(REPLY)
        pipeline = QueryPipeline(LocalSearcher(service), generator, settings.query)
        who = Authenticator(keys, oidc)
        shards = LocalShards(ShardHost(settings, lambda root: service))
        gateway = Gateway(settings, who, pipeline, pipeline.generator, embed,
                          partial(TenantShards, shards))  # fmt: skip
        guard = RequestGuard(who, config.index.limits.max_bytes)
        return TestClient(create_app(gateway, guard), raise_server_exceptions=False)

    yield build, secrets
    service.close()


def auth(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


def upload(client: TestClient, secret: str, name: str = "leave.txt", data: bytes = LEAVE):
    return client.post("/v1/files", headers=auth(secret), files={"file": (name, data)},
                       data={"purpose": "assistants"})  # fmt: skip


def error_of(response) -> dict:
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def v1_routes(app) -> list[tuple[str, str]]:
    """Every route of the API (OpenAI's /v1, Grounded's own /grounded/v1) and its method."""
    return sorted((method, route.path) for route in app.routes
                  for method in getattr(route, "methods", ()) or ()
                  if route.path.startswith(("/v1/", "/grounded/v1/"))
                  and method != "HEAD")  # fmt: skip


def test_every_v1_route_refuses_a_request_without_a_key(world):
    build, _ = world
    client = build()
    routes = v1_routes(client.app)
    assert len(routes) >= 25  # chat, responses, files, vector stores, embeddings, models
    modules = {
        route.endpoint.__module__ for route in client.app.routes if hasattr(route, "endpoint")
    }
    assert {f"serve.http.routes.{m}" for m in
            ("chat", "responses", "files", "vector_stores", "embeddings")} <= modules  # fmt: skip
    for method, path in routes:
        response = client.request(method, path.replace("{", "x").replace("}", ""))
        assert response.status_code == 401, (method, path, response.text)
        assert "API key" in error_of(response)["message"] or "key" in error_of(response)["message"]


def test_a_query_key_may_ask_but_not_ingest(world):
    build, secrets = world
    client = build()
    refused = upload(client, secrets["acme-read"])
    assert refused.status_code == 403 and error_of(refused)["type"] == "permission_denied"
    assert "ingest" in error_of(refused)["message"]
    assert client.get("/v1/files", headers=auth(secrets["acme-read"])).json()["data"] == []


def test_an_uploaded_file_is_answered_from_and_cited(world):
    build, secrets = world
    client = build()
    created = upload(client, secrets["acme"])
    assert created.status_code == 200 and created.json()["status"] == "processed"
    answered = client.post("/v1/chat/completions", headers=auth(secrets["acme"]), json=QUESTION)
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["choices"][0]["message"]["content"].startswith("Annual leave is 27 days")
    assert [s["file_id"] for s in body["grounded"]["sources"]] == [created.json()["id"]]
    assert body["usage"]["completion_tokens"] > 0
    assert body["id"].startswith("chatcmpl-")


def test_a_tenant_never_sees_another_tenants_files(world):
    build, secrets = world
    client = build()
    file_id = upload(client, secrets["acme"]).json()["id"]
    globex = auth(secrets["globex"])
    for path in (f"/v1/files/{file_id}", f"/v1/files/{file_id}/content"):
        response = client.get(path, headers=globex)
        assert response.status_code == 404 and file_id in error_of(response)["message"]
    assert client.delete(f"/v1/files/{file_id}", headers=globex).status_code == 404
    assert client.get("/v1/files", headers=globex).json()["data"] == []
    answered = client.post("/v1/chat/completions", headers=globex, json=QUESTION).json()
    assert answered["grounded"]["sources"] == []  # nothing of acme's to answer from
    assert client.get(f"/v1/files/{file_id}", headers=auth(secrets["acme"])).status_code == 200


def test_files_and_vector_stores_round_trip(world):
    build, secrets = world
    client, acme = build(), auth(secrets["acme"])
    file_id = upload(client, secrets["acme"]).json()["id"]
    content = client.get(f"/v1/files/{file_id}/content", headers=acme)
    assert content.status_code == 200 and "27 days" in content.text
    store = client.post("/v1/vector_stores", headers=acme,
                        json={"name": "hr", "file_ids": [file_id]}).json()  # fmt: skip
    assert store["object"] == "vector_store" and store["file_counts"]["total"] == 1
    found = client.post(f"/v1/vector_stores/{store['id']}/search", headers=acme,
                        json={"query": "annual leave"}).json()  # fmt: skip
    assert [hit["file_id"] for hit in found["data"]][:1] == [file_id]
    listed = client.get(f"/v1/vector_stores/{store['id']}/files", headers=acme).json()
    assert [f["id"] for f in listed["data"]] == [file_id]
    for wrong in ({"type": "static", "static": True}, {"static": [800, 400]},
                  {"type": "static", "static": {"max_chunk_size_tokens": 7}}):  # fmt: skip
        refused = client.post(f"/v1/vector_stores/{store['id']}/files", headers=acme,
                              json={"file_id": file_id, "chunking_strategy": wrong})  # fmt: skip
        assert refused.status_code == 400, refused.text
        assert error_of(refused)["param"] == "chunking_strategy"
    gone = client.get(f"/v1/vector_stores/{store['id']}", headers=auth(secrets["globex"]))
    assert gone.status_code == 404  # another tenant's store does not exist for it
    assert client.delete(f"/v1/files/{file_id}", headers=acme).json()["deleted"] is True
    assert client.get(f"/v1/files/{file_id}", headers=acme).status_code == 404


def test_models_embeddings_and_responses(world):
    build, secrets = world
    client, acme = build(), auth(secrets["acme"])
    upload(client, secrets["acme"])
    models = client.get("/v1/models", headers=acme).json()
    assert "grounded" in {m["id"] for m in models["data"]}
    model = models["data"][-1]["id"]
    embedded = client.post("/v1/embeddings", headers=acme, json={"model": model, "input": ["a b"]})
    assert embedded.status_code == 200, embedded.text
    assert embedded.json()["usage"]["prompt_tokens"] == 2
    created = client.post(
        "/v1/responses",
        headers=acme,
        json={"model": "grounded", "input": "How many days of annual leave?"},
    )
    assert created.status_code == 200, created.text
    response_id = created.json()["id"]
    assert "27 days" in json.dumps(created.json()["output"])
    assert client.get(f"/v1/responses/{response_id}", headers=acme).status_code == 200
    other = client.get(f"/v1/responses/{response_id}", headers=auth(secrets["globex"]))
    assert other.status_code == 404
    assert client.delete(f"/v1/responses/{response_id}", headers=acme).status_code == 200


def test_several_models_are_listed_asked_by_name_routed_and_accounted_by_model(world):
    build, secrets = world
    small, large = ScriptedGenerator(REPLY), ScriptedGenerator("Large: 27 days [1].")
    client, acme = build(models={"small": small, "large": large}), auth(secrets["acme"])
    upload(client, secrets["acme"])
    listed = client.get("/v1/models", headers=acme).json()["data"]
    assert [m["id"] for m in listed[:3]] == ["grounded", "small", "large"]
    assert listed[0]["grounded"]["routes_to"] == ["small", "large"]
    routed = client.post("/v1/chat/completions", headers=acme, json=QUESTION).json()
    assert routed["model"] == "grounded" and routed["grounded"]["route"]["model"] == "small"
    assert routed["grounded"]["route"]["decision"] == "routed"
    assert routed["grounded"]["cost"]["amount"] == 0  # small has the default prices: 0
    named = client.post("/v1/chat/completions", headers=acme, json={**QUESTION, "model": "large"})
    body = named.json()
    assert body["model"] == "large" and body["choices"][0]["message"]["content"].startswith("Large")
    assert body["grounded"]["route"] == {"model": "large", "decision": "asked", "reason": None,
                                         "first": None}  # fmt: skip
    completion = body["usage"]["completion_tokens"]
    assert body["grounded"]["cost"]["amount"] == pytest.approx(completion * 1000.0 / 1e6)
    streamed = client.post("/v1/chat/completions", headers=acme,
                           json={**QUESTION, "model": "large", "stream": True})  # fmt: skip
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    assert {c["model"] for c in chunks} == {"large"}
    response = client.post("/v1/responses", headers=acme, json={"model": "small", "input": ASKED})
    assert response.json()["model"] == "small" and len(small.calls) == 2
    unknown = client.post("/v1/chat/completions", headers=acme, json={**QUESTION, "model": "xl"})
    error = error_of(unknown)
    assert unknown.status_code == 404 and error["code"] == "model_not_found"
    assert "'small', 'large'" in error["message"] and error["param"] == "model"
    (row,) = client.app.state.gateway.ledger.usage(tenant="acme")
    assert set(row.models) == {"small", "large"}
    assert row.models["large"]["completion_tokens"] == 2 * completion


def test_each_generator_has_its_own_fair_queue(world):
    """One generation slot per model: the large model busy does not hold up the small one,
    and a second large generation waits for the first."""
    import asyncio

    build, secrets = world
    models = {"small": ScriptedGenerator(REPLY), "large": ScriptedGenerator(REPLY)}
    client = build(models=models, serve={"generation_slots": 1})
    gateway = client.app.state.gateway
    key = gateway.keys.authenticate(f"Bearer {secrets['acme']}")

    async def scenario():
        admit = gateway.admission(key, [])

        async def generate(model: str):
            async with admit(10, model):
                pass

        async with admit(10, "large"):
            await asyncio.wait_for(generate("small"), 2)  # not queued behind large
            waiting = asyncio.create_task(generate("large"))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # large's one slot is taken
        await asyncio.wait_for(waiting, 2)

    asyncio.run(scenario())


def test_a_budget_spent_is_429_with_retry_after_and_the_next_tenant_unaffected(world):
    build, secrets = world
    client = build()
    upload(client, secrets["initech"])
    question = {**QUESTION, "max_tokens": 20}
    statuses = []
    for _ in range(6):  # 400 tokens a minute: a few questions, then the window is spent
        response = client.post("/v1/chat/completions", headers=auth(secrets["initech"]),
                               json=question)  # fmt: skip
        statuses.append(response.status_code)
    assert statuses[0] == 200 and statuses[-1] == 429, (statuses, response.text)
    refused = response
    assert error_of(refused)["type"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) > 0
    assert "tokens_per_minute" in error_of(refused)["message"]
    other = client.post("/v1/chat/completions", headers=auth(secrets["acme"]), json=question)
    assert other.status_code == 200
    too_big = client.post("/v1/chat/completions", headers=auth(secrets["initech"]),
                          json={**QUESTION, "max_tokens": 1000})  # fmt: skip
    assert too_big.status_code == 400  # more than a whole window: waiting would not help
    assert error_of(too_big)["param"] == "max_tokens"


def test_a_stream_that_breaks_ends_with_an_error_event(world):
    build, secrets = world
    client = build(FailingGenerator(REPLY))
    upload(client, secrets["acme"])
    with client.stream("POST", "/v1/chat/completions", headers=auth(secrets["acme"]),
                       json={**QUESTION, "stream": True}) as response:  # fmt: skip
        assert response.status_code == 200  # the failure comes after the first bytes
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line]
    assert events[-1] != "[DONE]"
    last = json.loads(events[-1])
    assert set(last["error"]) == {"message", "type", "param", "code"}
    assert "internal error" in last["error"]["message"] or "request" in last["error"]["message"]


def test_bad_requests_are_400s_naming_what_was_wrong(world):
    build, secrets = world
    client, acme = build(), auth(secrets["acme"])
    not_json = client.post("/v1/chat/completions", headers={**acme, "content-type":
                           "application/json"}, content=b"{not json")  # fmt: skip
    assert not_json.status_code == 400 and "not valid JSON" in error_of(not_json)["message"]
    empty = client.post("/v1/chat/completions", headers=acme, json={"model": "grounded"})
    assert empty.status_code == 400 and error_of(empty)["param"] == "messages"
    unknown = client.post("/v1/chat/completions", headers=acme,
                          json={**QUESTION, "model": "gpt-4o"})  # fmt: skip
    assert unknown.status_code == 404 and "gpt-4o" in error_of(unknown)["message"]
    nowhere = client.get("/v1/nowhere", headers=acme)
    assert nowhere.status_code == 404 and "no route GET /v1/nowhere" in error_of(nowhere)["message"]
    huge = client.post("/v1/embeddings", headers=acme, json={"input": "a" * (JSON_BODY_LIMIT + 1)})
    assert huge.status_code == 413 and "bytes" in error_of(huge)["message"]
    number = client.post(
        "/v1/responses",
        headers=acme,
        json={"model": "grounded", "input": [{"role": "user", "content": 5}]},
    )
    assert number.status_code == 400 and error_of(number)["param"] == "input"


def all_errors(base=GroundedError):
    for sub in base.__subclasses__():
        yield sub
        yield from all_errors(sub)


def make(cls, message: str) -> GroundedError:
    for args, kwargs in (((message,), {}), (("a.pdf", message), {}),  # a file, then why
                         ((message,), {"reason": "test"})):  # fmt: skip
        try:
            return cls(*args, **kwargs)
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls}")


def raise_in_gateway(monkeypatch, exc: GroundedError) -> None:
    async def ask(*args, **kwargs):
        raise exc

    monkeypatch.setattr(Gateway, "ask", ask)


@pytest.mark.parametrize("wrapped", [False, True], ids=["raised", "raised-in-a-deployment"])
def test_every_error_class_reaches_the_client_with_its_status_and_type(world, monkeypatch, wrapped):
    """The mapping of serve/http/app.py: each GroundedError (index/errors.py and the serve ones)
    is answered with its own status and OpenAI type; one raised in another deployment
    arrives wrapped (the cause is answered); anything else is a 500 naming the request."""
    build, secrets = world
    classes = set(all_errors())
    assert len(classes) >= 20
    for cls in classes:
        exc = make(cls, "what was wrong")
        if wrapped:  # as Ray wraps it: an instance of the class, the original as its cause
            wrapper = make(type("Wrapped", (cls,), {}), "wrapper message")
            wrapper.cause = exc
            exc = wrapper
        raise_in_gateway(monkeypatch, exc)
        response = build().post("/v1/chat/completions", headers=auth(secrets["acme"]),
                                json=QUESTION)  # fmt: skip
        assert response.status_code == cls.status, cls
        error = error_of(response)
        assert error["type"] == cls.type and error["message"].endswith("what was wrong"), cls


def test_an_unexpected_failure_is_a_500_naming_the_request_never_a_traceback(world, monkeypatch):
    build, secrets = world

    async def ask(*args, **kwargs):
        raise KeyError("secret internals")

    monkeypatch.setattr(Gateway, "ask", ask)
    response = build().post(
        "/v1/chat/completions",
        json=QUESTION,
        headers={**auth(secrets["acme"]), "x-request-id": "req-mine"},
    )
    assert response.status_code == 500
    assert (
        error_of(response)["message"] == "internal error; see the server log for request req-mine"
    )
    assert "secret" not in response.text


def test_the_generator_starting_is_503_service_unavailable(world, monkeypatch):
    build, secrets = world
    raise_in_gateway(monkeypatch, GeneratorUnavailableError("the engine is starting"))
    response = build().post("/v1/chat/completions", headers=auth(secrets["acme"]), json=QUESTION)
    assert response.status_code == 503 and error_of(response)["type"] == "service_unavailable"
    assert "starting" in error_of(response)["message"]


SALARY = b"The salary band for engineers is 70,000 to 90,000 euros a year."


def test_a_restricted_document_reaches_only_those_who_may_read_it(world):
    """Two identities in one tenant, one document for group:hr: nothing of it reaches the
    other through chat (plain and streamed), Responses with file_search, vector-store search
    and files, whatever it asks; it reaches hr, and admins."""
    build, secrets = world
    client = build(ScriptedGenerator("The band is the one the source gives [1]."))
    acme, hr, admin = (auth(secrets[k]) for k in ("acme", "acme-hr", "acme-admin"))
    leave = upload(client, secrets["acme"]).json()["id"]
    created = client.post("/v1/files", headers=acme, files={"file": ("salaries.txt", SALARY)},
                          data={"purpose": "assistants", "access": "group:hr"})  # fmt: skip
    assert created.status_code == 200 and created.json()["grounded"]["access"] == ["group:hr"]
    salary = created.json()["id"]
    asked = {
        "model": "grounded",
        "messages": [{"role": "user", "content": "What is the salary band for engineers?"}],
    }

    def leaked(response) -> bool:  # a 404 repeats the id it was asked about, nothing more
        named = salary in response.text and response.status_code != 404
        return named or "70,000" in response.text or "salaries" in response.text

    answers = [client.post("/v1/chat/completions", headers=acme, json=asked),
               client.post("/v1/chat/completions", headers=acme, json={**asked, "stream": True}),
               client.post("/v1/responses", headers=acme, json={
                   "model": "grounded", "input": asked["messages"][0]["content"],
                   "tools": [{"type": "file_search", "vector_store_ids": ["vs_acme"]}]}),
               client.post("/v1/vector_stores/vs_acme/search", headers=acme,
                           json={"query": "salary band engineers euros"}),
               client.get("/v1/files", headers=acme),
               client.get(f"/v1/files/{salary}", headers=acme),
               client.get(f"/v1/files/{salary}/content", headers=acme),
               client.delete(f"/v1/files/{salary}", headers=acme)]  # fmt: skip
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 200, 404, 404, 404]
    assert not any(leaked(r) for r in answers), [r.text[:300] for r in answers if leaked(r)]
    assert leave in answers[4].text  # the open document is still listed and searched

    for reader in (hr, admin):
        found = client.post("/v1/vector_stores/vs_acme/search", headers=reader,
                            json={"query": "salary band engineers euros"}).json()  # fmt: skip
        assert salary in {hit["file_id"] for hit in found["data"]}
        answered = client.post("/v1/chat/completions", headers=reader, json=asked).json()
        assert salary in {s["file_id"] for s in answered["grounded"]["sources"]}
        assert client.get(f"/v1/files/{salary}/content", headers=reader).status_code == 200


def test_access_is_changed_by_a_key_that_reads_it_and_holds_from_the_next_request(world):
    build, secrets = world
    client = build()
    acme, reader, admin = (auth(secrets[k]) for k in ("acme", "acme-read", "acme-admin"))
    created = client.post("/v1/files", headers=acme, files={"file": ("salaries.txt", SALARY)},
                          data={"access": "group:hr"}).json()  # fmt: skip
    path = f"/v1/files/{created['id']}/access"
    assert client.get(f"/v1/files/{created['id']}", headers=reader).status_code == 404
    assert client.post(path, headers=reader, json={"access": "tenant"}).status_code == 403
    hidden = client.post(path, headers=acme, json={"access": "tenant"})
    assert hidden.status_code == 404  # an ingest key may not change what it cannot read
    bad = client.post(path, headers=admin, json={"access": "hr"})
    assert bad.status_code == 400 and "group:<name>" in error_of(bad)["message"]
    reader_file = upload(client, secrets["acme"], "note.txt", b"A note for the sales team.").json()
    closed = client.post(f"/v1/files/{reader_file['id']}/access", headers=acme,
                         json={"access": "group:sales"})  # fmt: skip
    assert closed.status_code == 200  # changed, though the key reads it no more
    assert closed.json()["grounded"]["access"] == ["group:sales"]
    assert client.get(f"/v1/files/{reader_file['id']}", headers=acme).status_code == 404
    opened = client.post(path, headers=admin, json={"access": "tenant"})
    assert opened.status_code == 200 and opened.json()["grounded"]["access"] is None
    assert client.get(f"/v1/files/{created['id']}", headers=reader).status_code == 200
    version = opened.json()["grounded"]["version"]
    assert version == created["grounded"]["version"]  # nothing embedded again
    bad_upload = client.post("/v1/files", headers=acme, files={"file": ("x.txt", SALARY)},
                             data={"access": "everyone"})  # fmt: skip
    assert bad_upload.status_code == 400
    assert "x.txt" not in client.get("/v1/files", headers=admin).text


def test_a_stored_response_is_read_by_the_identity_that_created_it(world):
    build, secrets = world
    client = build()
    upload(client, secrets["acme"])
    created = client.post("/v1/responses", headers=auth(secrets["acme-hr"]),
                          json={"model": "grounded", "input": ASKED}).json()  # fmt: skip
    path = f"/v1/responses/{created['id']}"
    for other in ("acme", "acme-read"):  # the same tenant, another identity
        assert client.get(path, headers=auth(secrets[other])).status_code == 404
        assert client.get(path + "/input_items", headers=auth(secrets[other])).status_code == 404
        assert client.delete(path, headers=auth(secrets[other])).status_code == 404
        follow = client.post(
            "/v1/responses",
            headers=auth(secrets[other]),
            json={"model": "grounded", "input": "And then?", "previous_response_id": created["id"]},
        )
        assert follow.status_code == 404
    assert client.get(path, headers=auth(secrets["acme-hr"])).json()["id"] == created["id"]
    assert client.get(path, headers=auth(secrets["acme-admin"])).status_code == 200
    assert client.delete(path, headers=auth(secrets["acme-hr"])).status_code == 200


def test_answers_searches_and_file_reads_are_audited_with_who_and_what(world, tmp_path):
    from serve.identity.audit import AuditConfig, AuditLog

    build, secrets = world
    client = build()
    hr = auth(secrets["acme-hr"])
    file_id = upload(client, secrets["acme"]).json()["id"]
    client.post("/v1/chat/completions", headers=hr, json=QUESTION)
    client.post("/v1/vector_stores/vs_acme/search", headers=hr, json={"query": "annual leave"})
    client.get(f"/v1/files/{file_id}/content", headers=hr)
    trail = list(AuditLog(tmp_path / "data", AuditConfig()).entries(user="hana"))
    assert [e["endpoint"] for e in trail] == [
        "chat.completions", "vector_stores.search", "files.content"]  # fmt: skip
    chat = trail[0]
    assert (chat["tenant"], chat["identity"], chat["groups"]) == ("acme", "user:hana", ["hr"])
    assert chat["question"] == ASKED and chat["retrieved"] == [file_id]
    assert chat["cited"] == [file_id] and chat["abstained"] is False
    assert trail[1]["retrieved"] == [file_id] and trail[2]["retrieved"] == [file_id]


def test_a_token_from_the_identity_provider_is_a_caller_like_a_key(world):
    """A signed-in user reads what its groups may read; a forged token is a 401 in OpenAI's
    shape, before the request's body is read."""
    from tests.unit.serve.test_identity import AUDIENCE, Issuer, forged

    issuer = Issuer()
    issuer.new_key("rsa-1")
    try:
        build, secrets = world
        client = build(oidc=OidcConfig(issuer=issuer.url, audience=AUDIENCE, tenants=["acme"]))
        client.post(
            "/v1/files",
            headers=auth(secrets["acme"]),
            files={"file": ("salaries.txt", SALARY)},
            data={"access": "group:hr"},
        )
        search = {"query": "salary band engineers euros"}
        for groups, sees in ((["hr"], True), (["sales"], False)):
            token = issuer.token(groups=groups, scope="query")
            found = client.post("/v1/vector_stores/vs_acme/search", json=search,
                                headers={"authorization": f"Bearer {token}"})  # fmt: skip
            assert found.status_code == 200, found.text
            assert ("salaries.txt" in found.text) is sees
        unsigned = forged({"alg": "none"}, {"iss": issuer.url, "aud": AUDIENCE, "sub": "x",
                                            "tenant": "acme", "exp": 2**31}, None)  # fmt: skip
        refused = client.post("/v1/chat/completions", json=QUESTION,
                              headers={"authorization": f"Bearer {unsigned}"})  # fmt: skip
        assert refused.status_code == 401 and "algorithm 'none'" in error_of(refused)["message"]
        no_scope = issuer.token(scope="")
        assert client.post("/v1/chat/completions", json=QUESTION, headers={
            "authorization": f"Bearer {no_scope}"}).status_code == 403  # fmt: skip
    finally:
        issuer.server.shutdown()
