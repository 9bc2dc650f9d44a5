"""Sources a person can read (serve/http/readable.py), through the HTTP API in-process
(test_http.py's world): a key made for a chat window gets each cited source listed after the
answer, in the message text and in the stream alike, in the question's language; a request
may ask for it or turn it off; a "not found" lists nothing; the annotations do not move."""

from __future__ import annotations

import json

import pytest

from serve.identity.keys import KeyStore
from serve.testing import ScriptedGenerator
from tests.unit.serve.test_http import QUESTION, auth, upload, world  # noqa: F401

pytestmark = pytest.mark.unit


def content(response) -> str:
    return response.json()["choices"][0]["message"]["content"]


def streamed(client, headers, body) -> str:
    events = client.post("/v1/chat/completions", headers=headers, json={**body, "stream": True})
    text = ""
    for line in events.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


def test_a_chat_window_key_reads_the_sources_after_the_answer(world, tmp_path):  # noqa: F811
    build, secrets = world
    client = build()
    window = auth(KeyStore(tmp_path / "data").create("acme", ["query"], sources_in_text=True)[1])
    file_id = upload(client, secrets["acme"]).json()["id"]

    plain = client.post("/v1/chat/completions", headers=auth(secrets["acme"]), json=QUESTION)
    listed = client.post("/v1/chat/completions", headers=window, json=QUESTION)
    answer = content(plain)
    assert "Sources" not in answer  # API clients: unchanged
    assert content(listed) == answer + "\n\nSources:\n- [1] leave.txt"
    spans = [a["url_citation"]["end_index"] for a in
             listed.json()["choices"][0]["message"]["annotations"]]  # fmt: skip
    assert spans and max(spans) <= len(answer)  # the annotations mark the answer, as before
    assert file_id in listed.json()["choices"][0]["message"]["annotations"][0]["url_citation"][
        "url"]  # fmt: skip
    assert streamed(client, window, QUESTION) == content(listed)  # streamed with the answer

    off = client.post("/v1/chat/completions", headers=window,
                      json={**QUESTION, "sources_in_text": False})  # fmt: skip
    on = client.post("/v1/chat/completions", headers=auth(secrets["acme"]),
                     json={**QUESTION, "sources_in_text": True})  # fmt: skip
    assert content(off) == answer and content(on) == content(listed)

    french = {"model": "grounded", "messages": [
        {"role": "user", "content": "Combien de jours de congés annuels ?"}]}  # fmt: skip
    assert "\n\nSources :\n- [1] leave.txt" in content(
        client.post("/v1/chat/completions", headers=window, json=french))  # fmt: skip


QUOTED = {"query": {"answer_format": "quoted", "min_dense_score": 0.0}}


def test_a_verified_quote_is_shown_and_a_not_found_lists_nothing(world, tmp_path):  # noqa: F811
    build, secrets = world
    quote = "Annual leave is 27 days per calendar year for every employee."
    reply = json.dumps({"source": 1, "quote": quote, "answer": "27 days a year"})
    client = build(ScriptedGenerator(reply), **QUOTED)
    window = auth(KeyStore(tmp_path / "data").create("acme", ["query"], sources_in_text=True)[1])
    upload(client, secrets["acme"])
    listed = content(client.post("/v1/chat/completions", headers=window, json=QUESTION))
    assert listed.endswith(f"\n\nSources:\n- [1] leave.txt: “{quote}”"), listed

    none = json.dumps({"source": 0, "quote": "", "answer": ""})
    abstained = build(ScriptedGenerator(none), **QUOTED).post(
        "/v1/chat/completions", headers=window, json=QUESTION)  # fmt: skip
    assert abstained.json()["grounded"]["abstained"] and "Sources" not in content(abstained)
