"""The clients people point at Grounded, against the appliance with the real default model
(so that answers carry citations): every object checked strictly against the `openai`
package's types, and the Vercel AI SDK (pinned in tests/clients/js) driving chat, streaming
and embeddings.

The model is fetched into the repository's data directory the first time (as in
test_default_model.py); `make setup` installs Node and the SDK.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.parse

import httpx
import openai
import pytest
from openai.types import CreateEmbeddingResponse, FileDeleted, FileObject, Model
from openai.types.chat import ChatCompletion

from serve.config import load_config
from serve.engine.models import fetch, models_dir
from serve.identity.keys import KeyStore
from tests.appliances import free_port
from tests.conftest import CORPUS, REPO, use_engine_environment, with_judge
from tests.openai_schema import chunk_conforms, conforms
from tests.openai_spec import conforms_to, documented_operations, spec_conforms

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.model]
JS = REPO / "tests" / "clients" / "js"
LEAVE = "How many days of paid annual leave do employees get per year?"
ZEBRA = b"Field notes. The zebra crossing code is QX-77. It opens the north gate."


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    root = tmp_path_factory.mktemp("clients")
    use_engine_environment()
    folder = models_dir(REPO / "data") / "qwen2.5-0.5b"
    if not (folder / "config.json").is_file():
        fetch("qwen2.5-0.5b", REPO / "data")
    shipped = load_config(REPO / "configs" / "cpu.yaml").generator
    engine = shipped.engine_kwargs | {"kv_cache_memory_bytes": 512 * 2**20}  # eager, as shipped
    config = load_config(
        REPO / "configs" / "cpu.yaml",
        data_dir=root / "data",
        generator=shipped.model_copy(
            update={"model": str(folder), "max_tokens": 80, "engine_kwargs": engine}
        ),
        serve={"port": free_port(), "metrics_port": free_port()},
    )
    # The answer check runs in the appliance (through the generator deployment), at a threshold
    # the 0.5B model's right answer clears: cpu.yaml's is qwen2.5-1.5b's own.
    query = config.query.model_copy(update={"min_answer_support": 0.05})
    config = with_judge(config.model_copy(update={"query": query}))
    _, secret = KeyStore(config.data_dir).create("acme", ["query", "ingest"])
    from serve.ops import up

    running = up.start(config, dashboard=False, timeout_s=600, ray_options={"num_cpus": 2})
    try:
        api = openai.OpenAI(base_url=running.api_url, api_key=secret, max_retries=0, timeout=600)
        for path in sorted((CORPUS / "acme").iterdir()):
            api.files.create(file=(path.name, path.read_bytes()), purpose="assistants")
        yield running.api_url, secret
    finally:
        running.stop()


def raw(appliance) -> httpx.Client:
    url, secret = appliance
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=600)


def sse(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.iter_lines()
            if line.startswith("data: ")]  # fmt: skip


def cites_real_passages(http: httpx.Client, url: str, completion: ChatCompletion, files) -> None:
    """The real model cites: each citation's span lies in the answer, its URL is the cited
    file's text (its fragment the cited chunk, not empty) and its title the file's name."""
    annotations = completion.choices[0].message.annotations
    text = completion.choices[0].message.content
    assert annotations, text
    for annotation in annotations:
        cited = annotation.url_citation
        assert 0 <= cited.start_index < cited.end_index <= len(text)
        path, fragment = cited.url.split("#char=")
        start, end = map(int, fragment.split(","))
        assert path.startswith(f"{url}/files/")
        assert path.endswith("/content?format=text")
        parsed = urllib.parse.urlparse(path)
        document = http.get(parsed.path.removeprefix("/v1") + "?" + parsed.query).text
        assert document[start:end].strip()
        assert any(cited.title.startswith(f["filename"]) for f in files), cited.title


def test_every_payload_conforms_to_openais_types_and_published_spec(appliance):
    """Each implemented endpoint's body (every streamed chunk and event included) against
    OpenAI's OpenAPI document (tests/openai_spec): no null where the spec's type has none, no
    field outside it but the tolerated ones, scores in [0, 1], pagination on every list; the
    objects the `openai` package types parsed strictly by them (tests/openai_schema), with
    real citations."""
    checked = []

    def check(operation: str, response: httpx.Response, status: int = 200) -> dict:
        assert response.status_code == status, response.text
        body = response.json()
        spec_conforms(operation, body) if status == 200 else conforms_to("ErrorResponse", body)
        checked.append(operation)
        return body

    with raw(appliance) as http:
        models = check("GET /models", http.get("/models"))
        conforms(Model, models["data"][0])
        kinds = {m["id"]: m["grounded"]["kind"] for m in models["data"]}
        assert kinds == {"grounded": "chat", "all-MiniLM-L6-v2": "embedding"}
        for model in kinds:
            vectors = check("POST /embeddings", http.post("/embeddings", json={
                "model": model, "input": ["annual leave"]}))  # fmt: skip
            assert len(vectors["data"][0]["embedding"]) == 384
            conforms(CreateEmbeddingResponse, vectors)
        missing = http.post("/embeddings", json={"model": "ada", "input": ["x"]})
        assert "all-MiniLM-L6-v2" in check("error", missing, 404)["error"]["message"]
        wrong = {"model": "all-MiniLM-L6-v2", "messages": [{"role": "user", "content": LEAVE}]}
        assert "embedding model" in check("error", http.post("/chat/completions", json=wrong),
                                          404)["error"]["message"]  # fmt: skip

        note = check("POST /files", http.post("/files", files={"file": ("zebra.txt", ZEBRA)}))
        conforms(FileObject, note)
        check("GET /files/{file_id}", http.get(f"/files/{note['id']}"))
        listed = check("GET /files", http.get("/files"))
        for item in listed["data"]:
            conforms(FileObject, item)
        assert listed["first_id"] == note["id"] and not listed["has_more"]  # newest first
        first = check("GET /files", http.get("/files", params={"limit": 1, "order": "asc"}))
        rest = check("GET /files", http.get("/files", params={"after": first["last_id"]}))
        assert first["has_more"] and first["last_id"] not in {f["id"] for f in rest["data"]}
        empty = check("GET /files", http.get("/files", params={"purpose": "batch"}))
        assert empty["data"] == [] and empty["first_id"] == empty["last_id"] == ""

        body = {"model": "grounded", "messages": [{"role": "user", "content": LEAVE}]}
        reply = check("POST /chat/completions", http.post("/chat/completions", json=body))
        assert reply["grounded"]["answer_support"] >= 0.05  # checked, then shown
        completion = conforms(ChatCompletion, reply)
        cites_real_passages(http, appliance[0], completion, listed["data"])
        text = completion.choices[0].message.content
        assert "27" in text
        # A small max_tokens is the answer's: the quote before it has its own room.
        short = check(
            "POST /chat/completions",
            http.post("/chat/completions", json={**body, "max_tokens": 24}),
        )
        assert "27" in short["choices"][0]["message"]["content"], short
        with http.stream("POST", "/chat/completions", json={**body, "stream": True,
                         "stream_options": {"include_usage": True}}) as response:  # fmt: skip
            events = sse(response)
        assert events[-1] == "[DONE]"
        for event in events[:-1]:
            spec_conforms("POST /chat/completions", json.loads(event), stream=True)
        checked.append("POST /chat/completions (stream)")
        chunks = [chunk_conforms(json.loads(e)) for e in events[:-1]]
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        final = json.loads(events[-3])["choices"][0]["delta"]["annotations"]
        annotations = completion.choices[0].message.annotations
        assert streamed == text and final == [a.model_dump() for a in annotations]

        store = check("POST /vector_stores", http.post("/vector_stores", json={
            "name": "notes", "file_ids": [note["id"]]}))  # fmt: skip
        sid = store["id"]
        check("GET /vector_stores", http.get("/vector_stores"))
        check("GET /vector_stores/{vector_store_id}", http.get(f"/vector_stores/{sid}"))
        check("POST /vector_stores/{vector_store_id}",
              http.post(f"/vector_stores/{sid}", json={"name": "zebra notes"}))  # fmt: skip
        files = f"/vector_stores/{sid}/files"
        check("GET /vector_stores/{vector_store_id}/files", http.get(files))
        check("GET /vector_stores/{vector_store_id}/files/{file_id}",
              http.get(f"{files}/{note['id']}"))  # fmt: skip
        check(
            "POST /vector_stores/{vector_store_id}/files/{file_id}",
            http.post(f"{files}/{note['id']}", json={"attributes": {"site": "lyon"}}),
        )
        check("GET /vector_stores/{vector_store_id}/files/{file_id}/content",
              http.get(f"{files}/{note['id']}/content"))  # fmt: skip
        batch = check("POST /vector_stores/{vector_store_id}/file_batches",
                      http.post(f"/vector_stores/{sid}/file_batches",
                                json={"file_ids": [note["id"]]}))  # fmt: skip
        batches = f"/vector_stores/{sid}/file_batches/{batch['id']}"
        check("GET /vector_stores/{vector_store_id}/file_batches/{batch_id}", http.get(batches))
        check("POST /vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel",
              http.post(f"{batches}/cancel"))  # fmt: skip
        handbook = next(f["id"] for f in listed["data"] if f["filename"].endswith(".md"))
        check("POST /vector_stores/{vector_store_id}/files",
              http.post(files, json={"file_id": handbook}))  # fmt: skip
        check("GET /vector_stores/{vector_store_id}/file_batches/{batch_id}/files",
              http.get(f"{batches}/files"))  # fmt: skip
        page = check("POST /vector_stores/{vector_store_id}/search",
                     http.post(f"/vector_stores/{sid}/search",
                               json={"query": "zebra crossing code"}))  # fmt: skip
        assert page["data"] and all(0 <= r["score"] <= 1 for r in page["data"])
        every = http.post("/vector_stores/vs_acme/search", json={"query": LEAVE, "grounded": True})
        assert every.status_code == 200 and all(
            isinstance(r["grounded"]["raw_score"], float) for r in every.json()["data"]
        )  # the extension, asked for, keeps the judge's raw score

        tool = {"type": "file_search", "vector_store_ids": ["vs_acme"]}
        asked = {"model": "grounded", "input": LEAVE, "tools": [tool],
                 "include": ["file_search_call.results"]}  # fmt: skip
        response = check("POST /responses", http.post("/responses", json=asked))
        for output in response["output"]:
            for result in output.get("results") or []:
                assert 0 <= result["score"] <= 1
        with http.stream("POST", "/responses", json={**asked, "stream": True}) as streamed:
            for event in sse(streamed):
                spec_conforms("POST /responses", json.loads(event), stream=True)
        checked.append("POST /responses (stream)")
        rid = response["id"]
        check("GET /responses/{response_id}", http.get(f"/responses/{rid}"))
        check("GET /responses/{response_id}/input_items", http.get(f"/responses/{rid}/input_items"))
        assert http.delete(f"/responses/{rid}").status_code == 200  # the spec gives no body

        check("DELETE /vector_stores/{vector_store_id}/files/{file_id}",
              http.delete(f"{files}/{note['id']}"))  # fmt: skip
        check("DELETE /vector_stores/{vector_store_id}", http.delete(f"/vector_stores/{sid}"))
        conforms(FileDeleted, check("DELETE /files/{file_id}", http.delete(f"/files/{note['id']}")))
        check("error", http.get(f"/files/{note['id']}"), 404)
    # Every operation the spec gives a body for, each checked at least once.
    assert documented_operations() <= set(checked), documented_operations() - set(checked)


def test_openai_python_sync_and_async_read_the_citations(appliance):
    url, secret = appliance
    messages = [{"role": "user", "content": LEAVE}]
    sync = openai.OpenAI(base_url=url, api_key=secret, max_retries=0, timeout=600)
    message = sync.chat.completions.create(model="grounded", messages=messages).choices[0].message
    assert message.annotations and message.annotations[0].type == "url_citation"

    async def stream() -> tuple[str, list]:
        client = openai.AsyncOpenAI(base_url=url, api_key=secret, max_retries=0, timeout=600)
        text, annotations = "", []
        async for chunk in await client.chat.completions.create(
            model="grounded", messages=messages, stream=True
        ):
            delta = chunk.choices[0].delta
            text += delta.content or ""
            annotations += (delta.model_extra or {}).get("annotations") or []
        return text, annotations

    text, annotations = asyncio.run(stream())
    assert text == message.content
    assert annotations == [a.model_dump() for a in message.annotations]


def test_vercel_ai_sdk_generates_streams_and_embeds_with_sources(appliance):
    node = shutil.which("node", path=str(REPO / ".venv" / "bin")) or shutil.which("node")
    if node is None or not (JS / "node_modules" / "ai").is_dir():
        pytest.fail("Node and the AI SDK are not installed: `make setup` installs them")
    url, secret = appliance
    result = subprocess.run([node, str(JS / "ai_sdk.mjs"), url, secret, LEAVE],
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    for mode in ("generate", "stream"):
        assert "27" in shown[mode]["text"], shown
        assert shown[mode]["finishReason"] in ("stop", "length")
        sources = shown[mode]["sources"]
        assert sources and all(s["sourceType"] == "url" for s in sources), shown
        assert all(s["url"].startswith(f"{url}/files/") and s["title"] for s in sources)
    assert shown["stream"]["text"] == shown["generate"]["text"]
    assert shown["generate"]["usage"]["inputTokens"] > 0
    assert shown["embed"]["dimensions"] == [384, 384]
