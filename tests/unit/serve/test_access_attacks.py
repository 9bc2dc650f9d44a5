"""Access tried as an attacker would, in-process over the real ShardHost (test_http.py's world):
two identities of one tenant, an HR editor (hana, group hr, ingest) and an engineer (eli, group
eng, ingest), a file restricted to group:hr. Each attack of issue 64 first, then every route of
the app, generated from its route table: a hidden file is answered exactly like an absent one,
and nothing of it (id, name, content) reaches the engineer by any route."""

from __future__ import annotations

import re

import pytest

from serve.testing import ScriptedGenerator
from tests.unit.serve.test_http import SALARY, auth, error_of, v1_routes, world  # noqa: F401

pytestmark = pytest.mark.unit

ABSENT = "doc-" + "0" * 20  # shaped like a file id; never one
REPLY = "The band is the one the source gives [1]."


def post_file(client, secret: str, name: str, data: bytes, access: str | None = None):
    form = {"purpose": "assistants", **({"access": access} if access is not None else {})}
    return client.post("/v1/files", headers=auth(secret), files={"file": (name, data)}, data=form)


@pytest.fixture
def hr(world):  # noqa: F811
    """(client, secrets, the HR file's id) with salaries.txt uploaded for group:hr."""
    build, secrets = world
    client = build(ScriptedGenerator(REPLY))
    created = post_file(client, secrets["acme-hr-editor"], "salaries.txt", SALARY, "group:hr")
    assert created.status_code == 200, created.text
    return client, secrets, created.json()["id"]


def content(client, secret: str, file_id: str) -> bytes:
    return client.get(f"/v1/files/{file_id}/content", headers=auth(secret)).content


def test_a_file_name_never_selects_another_identitys_document(hr):
    """Overwrite by name, and the same bytes uploaded again to open them: each is the
    engineer's own document; HR's keeps its content, version and list."""
    client, secrets, salaries = hr
    mine = post_file(client, secrets["acme-eng"], "salaries.txt", b"The engineers' own notes.")
    assert mine.status_code == 200 and mine.json()["id"] != salaries
    reopened = post_file(client, secrets["acme-eng"], "salaries.txt", SALARY, "tenant")
    assert reopened.json()["id"] == mine.json()["id"]  # its own file, a new version
    theirs = client.get(f"/v1/files/{salaries}", headers=auth(secrets["acme-hr"])).json()
    assert theirs["grounded"]["version"] == 1 and theirs["grounded"]["access"] == ["group:hr"]
    assert theirs["grounded"]["owner"] == "user:hana"
    assert content(client, secrets["acme-hr"], salaries) == SALARY
    assert (
        client.get(f"/v1/files/{salaries}", headers=auth(secrets["acme-read"])).status_code == 404
    )


def test_an_upload_never_takes_over_another_identitys_list(hr):
    """The engineer names a file first, for itself; HR's upload of that name, and HR's next
    version without an access field, stay HR's, with HR's list."""
    client, secrets, _ = hr
    eng, editor = secrets["acme-eng"], secrets["acme-hr-editor"]
    planted = post_file(client, eng, "plan.txt", b"A plan.", "user:eli").json()
    first = post_file(client, editor, "plan.txt", b"The HR plan for 2027.", "group:hr").json()
    second = post_file(client, editor, "plan.txt", b"The HR plan for 2028.").json()
    assert first["id"] == second["id"] != planted["id"]
    assert second["grounded"]["version"] == 2 and second["grounded"]["access"] == ["group:hr"]
    assert client.get(f"/v1/files/{second['id']}", headers=auth(eng)).status_code == 404
    kept = client.get(f"/v1/files/{planted['id']}", headers=auth(eng)).json()
    assert kept["grounded"]["access"] == ["user:eli"] and content(client, eng, planted["id"]) == (
        b"A plan."
    )


def test_only_its_owner_or_an_admin_changes_or_deletes_a_document(hr):
    client, secrets, salaries = hr
    eng, editor, admin = (auth(secrets[k]) for k in ("acme-eng", "acme-hr-editor", "acme-admin"))
    handbook = post_file(client, secrets["acme-hr-editor"], "handbook.txt", b"Leave: 27 days.")
    path = f"/v1/files/{handbook.json()['id']}"
    assert client.get(path, headers=eng).status_code == 200  # the tenant's to read
    refused = client.post(path + "/access", headers=eng, json={"access": "user:eli"})
    assert refused.status_code == 403 and "user:hana" in error_of(refused)["message"]
    assert client.delete(path, headers=eng).status_code == 403
    assert client.get(path, headers=eng).json()["grounded"]["access"] is None  # unchanged
    hidden = client.post(f"/v1/files/{salaries}/access", headers=eng, json={"access": "tenant"})
    absent = client.post(f"/v1/files/{ABSENT}/access", headers=eng, json={"access": "tenant"})
    assert same_answer(hidden, absent, salaries)
    changed = client.post(path + "/access", headers=editor, json={"access": "group:hr"})
    assert changed.status_code == 200 and changed.json()["grounded"]["access"] == ["group:hr"]
    assert client.delete(path, headers=admin).status_code == 200


@pytest.mark.parametrize("empty", ["", "   ", ",", [], [" "]])
def test_an_empty_access_value_is_a_400_and_changes_nothing(hr, empty):
    client, secrets, salaries = hr
    editor = auth(secrets["acme-hr-editor"])
    refused = client.post(f"/v1/files/{salaries}/access", headers=editor, json={"access": empty})
    assert refused.status_code == 400 and "empty" in error_of(refused)["message"]
    kept = client.get(f"/v1/files/{salaries}", headers=editor).json()["grounded"]["access"]
    assert kept == ["group:hr"]
    if isinstance(empty, str):
        upload = post_file(client, secrets["acme-hr-editor"], "other.txt", b"Other.", empty)
        assert upload.status_code == 400


def test_vector_store_routes_neither_attach_nor_detach_a_hidden_file(hr):
    client, secrets, salaries = hr
    eng, editor = auth(secrets["acme-eng"]), auth(secrets["acme-hr-editor"])
    own = client.post("/v1/vector_stores", headers=eng, json={"name": "mine"}).json()["id"]
    hr_store = client.post("/v1/vector_stores", headers=editor,
                           json={"name": "hr", "file_ids": [salaries]}).json()["id"]  # fmt: skip
    for method, path, body in (
        ("POST", f"/v1/vector_stores/{own}/files", {"file_id": "{file}"}),
        ("POST", "/v1/vector_stores", {"name": "x", "file_ids": ["{file}"]}),
        ("POST", f"/v1/vector_stores/{own}/file_batches", {"file_ids": ["{file}"]}),
    ):
        hidden, absent = (client.request(method, path, headers=eng, json=fill(body, file_id))
                          for file_id in (salaries, ABSENT))  # fmt: skip
        assert hidden.status_code == 404 and same_answer(hidden, absent, salaries), path
    for method, path in (("DELETE", f"/v1/vector_stores/{hr_store}/files/{salaries}"),
                         ("POST", f"/v1/vector_stores/{hr_store}"),
                         ("DELETE", f"/v1/vector_stores/{hr_store}")):  # fmt: skip
        body = {"name": "taken"} if method == "POST" else None
        refused = client.request(method, path, headers=eng, json=body)
        assert refused.status_code == 403 and "user:hana" in error_of(refused)["message"]
    listed = client.get(f"/v1/vector_stores/{hr_store}/files", headers=editor).json()
    assert [f["id"] for f in listed["data"]] == [salaries]  # HR's store as it was


def test_a_store_listing_gives_away_nothing_it_hides(hr):
    """A store that holds only the hidden file: an empty page with no cursor, a cursor at the
    hidden id refused as an absent one, member reads 404 as for a non-member, counts and size
    without it."""
    client, secrets, salaries = hr
    eng, editor = auth(secrets["acme-eng"]), auth(secrets["acme-hr-editor"])
    store = client.post("/v1/vector_stores", headers=editor,
                        json={"name": "hr", "file_ids": [salaries]}).json()["id"]  # fmt: skip
    page = client.get(f"/v1/vector_stores/{store}/files", headers=eng).json()
    empty = client.post("/v1/vector_stores", headers=eng, json={"name": "empty"}).json()["id"]
    nothing = client.get(f"/v1/vector_stores/{empty}/files", headers=eng).json()
    assert page == nothing and page["data"] == []
    for cursor in ("after", "before"):
        hidden, absent = (client.get(f"/v1/vector_stores/{store}/files?{cursor}={file_id}",
                                     headers=eng) for file_id in (salaries, ABSENT))  # fmt: skip
        assert hidden.status_code == 400 and same_answer(hidden, absent, salaries)
    for suffix in ("", "/content"):
        hidden, absent = (client.get(f"/v1/vector_stores/{store}/files/{file_id}{suffix}",
                                     headers=eng) for file_id in (salaries, ABSENT))  # fmt: skip
        assert hidden.status_code == 404 and same_answer(hidden, absent, salaries)
    seen = client.get(f"/v1/vector_stores/{store}", headers=eng).json()
    assert seen["file_counts"]["total"] == 0 and seen["usage_bytes"] == 0
    theirs = client.get(f"/v1/vector_stores/{store}", headers=editor).json()
    assert theirs["file_counts"]["total"] == 1 and theirs["usage_bytes"] == len(SALARY)


def test_a_stored_response_is_read_only_while_its_documents_are(hr):
    """HR's stored answer quoting the HR file: once the file is no longer HR's to read, the
    response, its input items and a follow-up on it are 404, as for an absent id."""
    client, secrets, salaries = hr
    reader, admin = auth(secrets["acme-hr"]), auth(secrets["acme-admin"])
    asked = {"model": "grounded", "input": "What is the salary band for engineers?"}
    created = client.post("/v1/responses", headers=reader, json=asked).json()
    path = f"/v1/responses/{created['id']}"
    assert salaries in created_sources(created)
    assert client.get(path, headers=reader).status_code == 200
    moved = client.post(f"/v1/files/{salaries}/access", headers=admin,
                        json={"access": "group:finance"})  # fmt: skip
    assert moved.status_code == 200
    follow = {**asked, "previous_response_id": created["id"]}
    absent = client.get("/v1/responses/resp_" + "0" * 24, headers=reader)
    for response in (client.get(path, headers=reader),
                     client.get(path + "/input_items", headers=reader),
                     client.post("/v1/responses", headers=reader, json=follow)):  # fmt: skip
        assert response.status_code == 404 and "70,000" not in response.text
        assert error_of(response)["type"] == error_of(absent)["type"]
    # the paths that read and delete stored responses run in the state threads
    # (serve/state/database.py off_loop): to another identity, and for reads to its revoked
    # owner, a hidden one answers exactly as an absent one
    absent_id = "resp_" + "0" * 24
    eng = auth(secrets["acme-eng"])
    asks = [(eng, "GET", ""), (eng, "GET", "/input_items"), (eng, "DELETE", ""),
            (reader, "GET", ""), (reader, "GET", "/input_items")]  # fmt: skip
    for who, method, suffix in asks:
        hidden = client.request(method, path + suffix, headers=who)
        missing = client.request(method, f"/v1/responses/{absent_id}{suffix}", headers=who)
        assert hidden.status_code == missing.status_code == 404
        assert hidden.text.replace(created["id"], "ID") == missing.text.replace(absent_id, "ID")
    assert client.get(path, headers=admin).status_code == 200  # not deleted; an admin reads it
    # its owner may still delete its own stored answer: nothing of the document comes back
    deleted = client.delete(path, headers=reader)
    assert deleted.status_code == 200 and not any(leak in deleted.text for leak in LEAKS)
    assert client.get(path, headers=admin).status_code == 404


def test_a_signed_in_user_who_lost_a_group_no_longer_reads_its_stored_answers(world):  # noqa: F811
    """The same user (the same sub), signed in again with its groups changed."""
    from serve.identity.oidc import OidcConfig
    from tests.unit.serve.test_identity import AUDIENCE, Issuer

    issuer = Issuer()
    issuer.new_key("rsa-1")
    try:
        build, secrets = world
        oidc = OidcConfig(issuer=issuer.url, audience=AUDIENCE, tenants=["acme"])
        client = build(ScriptedGenerator(REPLY), oidc=oidc)
        salaries = post_file(client, secrets["acme-hr-editor"], "salaries.txt", SALARY,
                             "group:hr").json()["id"]  # fmt: skip

        def bearer(groups):
            return {"authorization": f"Bearer {issuer.token(groups=groups, scope='query')}"}

        asked = {"model": "grounded", "input": "What is the salary band for engineers?"}
        created = client.post("/v1/responses", headers=bearer(["hr"]), json=asked).json()
        assert salaries in created_sources(created)
        path = f"/v1/responses/{created['id']}"
        assert client.get(path, headers=bearer(["hr"])).status_code == 200
        assert client.get(path, headers=bearer(["sales"])).status_code == 404
    finally:
        issuer.server.shutdown()


def created_sources(response: dict) -> set[str]:
    """The file ids a response's output cites or found."""
    return set(re.findall(r"doc-[0-9a-f]{20}", str(response)))


def same_answer(hidden, absent, hidden_id: str) -> bool:
    """The same status and the same body, once each names its own id as ID."""
    return hidden.status_code == absent.status_code and (
        hidden.text.replace(hidden_id, "ID") == absent.text.replace(ABSENT, "ID")
    )


# --- every route, from the route table ---------------------------------------------------------

LEAKS = ("salaries", "70,000", "90,000")  # the hidden file's name and content


def cases(ids: dict[str, str]) -> dict[tuple[str, str], list[tuple[str, dict | None]]]:
    """For each route of the app: the requests the engineer sends (a path and a JSON body),
    with ``{file}`` where a file id goes (sent twice: the hidden id, and an absent one)."""
    store, own, batch, response = ids["store"], ids["own"], ids["batch"], ids["response"]
    ask = {"model": "grounded", "messages": [{"role": "user", "content": "salary band?"}]}
    search = {"query": "salary band engineers euros"}
    return {
        ("GET", "/v1/models"): [("/v1/models", None)],
        ("POST", "/v1/chat/completions"): [("/v1/chat/completions", ask),
                                            ("/v1/chat/completions", {**ask, "stream": True})],
        ("POST", "/v1/embeddings"): [("/v1/embeddings", {"model": "all-MiniLM-L6-v2",
                                                         "input": "salary"})],
        ("POST", "/v1/responses"): [("/v1/responses", {"model": "grounded", "input": "salary?",
                                    "tools": [{"type": "file_search",
                                               "vector_store_ids": [store]}]})],
        ("GET", "/v1/responses/{response_id}"): [(f"/v1/responses/{response}", None)],
        ("DELETE", "/v1/responses/{response_id}"): [(f"/v1/responses/{response}", None)],
        ("GET", "/v1/responses/{response_id}/input_items"): [
            (f"/v1/responses/{response}/input_items", None)],
        ("POST", "/v1/files"): [],  # uploads name no existing file: the attacks above
        ("GET", "/v1/files"): [("/v1/files", None)],
        ("GET", "/v1/files/{file_id}"): [("/v1/files/{file}", None)],
        ("GET", "/v1/files/{file_id}/content"): [("/v1/files/{file}/content", None),
                                                 ("/v1/files/{file}/content?format=text", None)],
        ("POST", "/v1/files/{file_id}/access"): [("/v1/files/{file}/access",
                                                  {"access": "tenant"})],
        ("DELETE", "/v1/files/{file_id}"): [("/v1/files/{file}", None)],
        ("GET", "/v1/vector_stores"): [("/v1/vector_stores", None)],
        ("POST", "/v1/vector_stores"): [("/v1/vector_stores", {"file_ids": ["{file}"]})],
        ("GET", "/v1/vector_stores/{store_id}"): [(f"/v1/vector_stores/{store}", None)],
        ("POST", "/v1/vector_stores/{store_id}"): [(f"/v1/vector_stores/{own}", {"name": "n"})],
        ("DELETE", "/v1/vector_stores/{store_id}"): [(f"/v1/vector_stores/{store}", None)],
        ("POST", "/v1/vector_stores/{store_id}/search"): [
            (f"/v1/vector_stores/{store}/search", search),
            ("/v1/vector_stores/vs_acme/search", search)],
        ("GET", "/v1/vector_stores/{store_id}/files"): [
            (f"/v1/vector_stores/{store}/files", None),
            (f"/v1/vector_stores/{store}/files?after={{file}}", None)],
        ("POST", "/v1/vector_stores/{store_id}/files"): [
            (f"/v1/vector_stores/{own}/files", {"file_id": "{file}"})],
        ("GET", "/v1/vector_stores/{store_id}/files/{file_id}"): [
            (f"/v1/vector_stores/{store}/files/{{file}}", None)],
        ("POST", "/v1/vector_stores/{store_id}/files/{file_id}"): [
            (f"/v1/vector_stores/{own}/files/{{file}}", {"attributes": {"a": "b"}})],
        ("DELETE", "/v1/vector_stores/{store_id}/files/{file_id}"): [
            (f"/v1/vector_stores/{own}/files/{{file}}", None)],
        ("GET", "/v1/vector_stores/{store_id}/files/{file_id}/content"): [
            (f"/v1/vector_stores/{store}/files/{{file}}/content", None)],
        ("POST", "/v1/vector_stores/{store_id}/file_batches"): [
            (f"/v1/vector_stores/{own}/file_batches", {"file_ids": ["{file}"]})],
        ("GET", "/v1/vector_stores/{store_id}/file_batches/{batch_id}"): [
            (f"/v1/vector_stores/{store}/file_batches/{batch}", None)],
        ("POST", "/v1/vector_stores/{store_id}/file_batches/{batch_id}/cancel"): [
            (f"/v1/vector_stores/{store}/file_batches/{batch}/cancel", None)],
        ("GET", "/v1/vector_stores/{store_id}/file_batches/{batch_id}/files"): [
            (f"/v1/vector_stores/{store}/file_batches/{batch}/files", None)],
        # Sources are an admin's (403 to the engineer); none names a file.
        ("GET", "/grounded/v1/sources"): [("/grounded/v1/sources", None)],
        ("POST", "/grounded/v1/sources"): [("/grounded/v1/sources",
                                            {"name": "s", "source": "folder:/"})],
        ("GET", "/grounded/v1/sources/{name}"): [("/grounded/v1/sources/s", None)],
        ("POST", "/grounded/v1/sources/{name}/sync"): [("/grounded/v1/sources/s/sync", None)],
        ("DELETE", "/grounded/v1/sources/{name}"): [("/grounded/v1/sources/s", None)],
    }  # fmt: skip


def test_every_route_answers_a_hidden_file_as_an_absent_one_and_leaks_nothing(hr):
    """Generated from the app's route table: a route without a case here fails the test. A
    request naming a file is sent with the hidden id and with an absent one: same status,
    same body; no answer to the engineer holds the hidden file's id, name or content."""
    client, secrets, salaries = hr
    who = {role: auth(secrets[name]) for role, name in (
        ("editor", "acme-hr-editor"), ("reader", "acme-hr"), ("outsider", "acme-eng"))}  # fmt: skip
    assert attack_every_route(client, who, salaries) >= 40


def attack_every_route(client, who: dict[str, dict], hidden: str) -> int:
    """``client`` (an httpx-like client of the API: in-process, or the real appliance) with
    ``who``'s headers: ``editor`` owns the file ``hidden`` (for a group ``reader`` is in and
    ``outsider`` is not); every route of the app's table, sent as the outsider. Returns how
    many requests it sent."""
    from serve.http.app import create_app

    editor, reader, outsider = who["editor"], who["reader"], who["outsider"]
    store = client.post("/v1/vector_stores", headers=editor,
                        json={"name": "hr", "file_ids": [hidden]}).json()["id"]  # fmt: skip
    batch = client.post(f"/v1/vector_stores/{store}/file_batches", headers=editor,
                        json={"file_ids": [hidden]}).json()["id"]  # fmt: skip
    asked = {"model": "grounded", "input": "salary band?", "max_output_tokens": 16}
    response = client.post("/v1/responses", headers=reader, json=asked).json()["id"]
    own = client.post("/v1/vector_stores", headers=outsider, json={"name": "mine"}).json()["id"]
    table = cases({"store": store, "own": own, "batch": batch, "response": response})
    assert set(table) == set(v1_routes(create_app(None))), "a route without a leak case"
    sent = 0
    for (method, _), requests in table.items():
        for path, body in requests:
            answers = []
            for file_id in (hidden, ABSENT) if "{file}" in str((path, body)) else (None,):
                url = path.replace("{file}", file_id or "")
                answer = client.request(method, url, headers=outsider,
                                        json=fill(body, file_id))  # fmt: skip
                assert answer.status_code < 500, (method, url, answer.text[:300])
                answers.append(answer)
                sent += 1
            text = answers[0].text
            assert not any(leak in text for leak in LEAKS), (method, path, text[:300])
            if len(answers) == 2:
                assert same_answer(*answers, hidden), (method, path, answers[0].text[:300],
                                                       answers[1].text[:300])  # fmt: skip
            else:
                assert hidden not in text, (method, path, text[:300])
    assert client.get(f"/v1/files/{hidden}", headers=editor).status_code == 200  # untouched
    return sent


def fill(body, file_id: str | None):
    """``body`` with "{file}" replaced by ``file_id`` in every string."""
    if isinstance(body, dict):
        return {k: fill(v, file_id) for k, v in body.items()}
    if isinstance(body, list):
        return [fill(v, file_id) for v in body]
    if isinstance(body, str) and file_id is not None:
        return body.replace("{file}", file_id)
    return body


def test_every_read_of_a_restricted_document_is_in_the_audit_trail(hr, tmp_path):
    """HR reads the HR file by every route that shows its name, id or content: one entry
    each, naming it."""
    from serve.identity.audit import AuditConfig, AuditLog

    client, secrets, salaries = hr
    reader, editor = auth(secrets["acme-hr"]), auth(secrets["acme-hr-editor"])
    store = client.post("/v1/vector_stores", headers=editor,
                        json={"name": "hr", "file_ids": [salaries]}).json()["id"]  # fmt: skip
    batch = client.post(f"/v1/vector_stores/{store}/file_batches", headers=editor,
                        json={"file_ids": [salaries]}).json()["id"]  # fmt: skip
    asked = {"model": "grounded", "input": "What is the salary band for engineers?"}
    response = client.post("/v1/responses", headers=reader, json=asked).json()["id"]
    reads = {
        "files.list": ("GET", "/v1/files"),
        "files.get": ("GET", f"/v1/files/{salaries}"),
        "files.content": ("GET", f"/v1/files/{salaries}/content"),
        "vector_stores.files.list": ("GET", f"/v1/vector_stores/{store}/files"),
        "vector_stores.files.get": ("GET", f"/v1/vector_stores/{store}/files/{salaries}"),
        "vector_stores.files.content": (
            "GET", f"/v1/vector_stores/{store}/files/{salaries}/content"),
        "vector_stores.file_batches.files": (
            "GET", f"/v1/vector_stores/{store}/file_batches/{batch}/files"),
        "responses.body": ("GET", f"/v1/responses/{response}"),
        "responses.input_items": ("GET", f"/v1/responses/{response}/input_items"),
    }  # fmt: skip
    for method, path in reads.values():
        assert client.request(method, path, headers=reader).status_code == 200, path
    trail = AuditLog(tmp_path / "data", AuditConfig()).entries(user="hana", document=salaries)
    endpoints = [entry["endpoint"] for entry in trail]
    assert endpoints == ["responses", *reads], endpoints


def test_a_retried_create_with_its_idempotency_key_makes_nothing_twice(hr):
    """openai clients resend a create with the same Idempotency-Key when its answer was lost:
    the first one's vector store (or batch) answers again; another key, or another identity
    with the same key, makes its own."""
    client, secrets, salaries = hr
    editor, eng = auth(secrets["acme-hr-editor"]), auth(secrets["acme-eng"])

    def create(headers, key, body):
        return client.post("/v1/vector_stores", headers={**headers, "idempotency-key": key},
                           json=body).json()["id"]  # fmt: skip

    first = create(editor, "k-1", {"name": "hr", "file_ids": [salaries]})
    assert create(editor, "k-1", {"name": "hr", "file_ids": [salaries]}) == first
    other_key = create(editor, "k-2", {"name": "hr"})
    other_identity = create(eng, "k-1", {"name": "mine"})
    assert len({first, other_key, other_identity}) == 3
    listed = [s["id"] for s in client.get("/v1/vector_stores", headers=editor).json()["data"]]
    assert sorted(listed) == sorted([first, other_key, other_identity])
    path, again = f"/v1/vector_stores/{first}/file_batches", {**editor, "idempotency-key": "b-1"}
    batches = {client.post(path, headers=again, json={"file_ids": [salaries]}).json()["id"]
               for _ in range(2)}  # fmt: skip
    assert len(batches) == 1
