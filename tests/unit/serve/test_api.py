import base64
import json
import math

import numpy as np
import pydantic
import pytest
from openai.types import VectorStoreSearchResponse
from openai.types.chat import ChatCompletion

from index.errors import (
    AuthenticationError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    FileTooLargeError,
    InvalidRequestError,
    MalformedDocumentError,
    PermissionDeniedError,
    RateLimitError,
    UnsupportedFileError,
)
from index.types import SearchHit
from serve.http import api, objects
from serve.query.budget import ContextLengthError
from serve.query.citations import check_citations
from serve.query.generation import GeneratorUnavailableError
from serve.query.pipeline import Answer, Usage
from serve.query.prompt import canonical_order
from tests.openai_schema import chunk_conforms, conforms
from tests.openai_spec import NotConforming, spec_conforms

SEARCH = "POST /vector_stores/{vector_store_id}/search"

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequestError("bad"), 400, "invalid_request_error"),
        (ContextLengthError("too long: 5000 > 4096"), 400, "invalid_request_error"),
        (MalformedDocumentError("a.pdf", "damaged"), 400, "invalid_request_error"),
        (AuthenticationError("no key"), 401, "invalid_request_error"),
        (PermissionDeniedError("scope"), 403, "permission_denied"),
        (DocumentNotFoundError("no such file"), 404, "invalid_request_error"),
        (api.ModelNotFoundError("no model"), 404, "invalid_request_error"),
        (EmbedderMismatchError("other embedder"), 409, "invalid_request_error"),
        (FileTooLargeError("a.pdf", "over 50 MiB"), 413, "invalid_request_error"),
        (UnsupportedFileError("a.docx", "unsupported"), 415, "invalid_request_error"),
        (RateLimitError("queue full", retry_after=2.4), 429, "rate_limit_exceeded"),
        (GeneratorUnavailableError("starting"), 503, "service_unavailable"),
    ],
)
def test_every_error_maps_to_its_status_and_openai_shape(error, status, kind):
    response = api.error_response(error, "req-1")
    body = json.loads(response.body)
    assert response.status_code == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == kind and body["error"]["message"] == error.message
    assert response.headers["x-request-id"] == "req-1"
    if status == 429:
        assert response.headers["retry-after"] == "2"


def test_invalid_request_bodies_name_the_field():
    with pytest.raises(InvalidRequestError, match="messages: List should have at least 1"):
        api.parse(api.ChatRequest, {"model": "grounded", "messages": []})
    with pytest.raises(InvalidRequestError, match="last message must be the user's question"):
        api.parse(api.ChatRequest, {"model": "grounded",
                                    "messages": [{"role": "system", "content": "x"}]})  # fmt: skip
    for part, says in (
        ({"type": "image_url", "image_url": {"url": "x"}}, "'image_url' is not"),
        ({"type": "text", "text": None}, "must be a string, not NoneType"),
    ):
        with pytest.raises(InvalidRequestError, match=says):
            api.parse(
                api.ChatRequest,
                {"model": "grounded", "messages": [{"role": "user", "content": [part]}]},
            )
    with pytest.raises(InvalidRequestError, match="max_tokens: Input should be greater than 0"):
        api.parse(api.ChatRequest, {"model": "grounded", "max_tokens": 0,
                                    "messages": [{"role": "user", "content": "x"}]})  # fmt: skip


def test_chat_request_keeps_turns_and_maps_extensions():
    body = api.parse(api.ChatRequest, {
        "model": "grounded", "temperature": 0.2, "top_k": 3, "rerank": False,
        "filters": {"filenames": ["a.pdf"], "attributes": {"site": "lyon"}},
        "messages": [
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "First?"},
            {"role": "assistant", "content": "One."},
            {"role": "user", "content": [{"type": "text", "text": "And then?"}]},
        ],
    })  # fmt: skip
    assert body.question() == "And then?"
    assert [(t.role, t.content) for t in body.history()] == [("user", "First?"),
                                                             ("assistant", "One.")]  # fmt: skip
    options = body.options()
    assert options.top_k == 3 and options.rerank is False
    assert options.search_filter.file_names == ("a.pdf",)
    assert options.search_filter.attributes == {"site": "lyon"}


FILES = "http://127.0.0.1:8000/v1/files"
LEAVE = "Every employee receives 27 days of paid annual leave."


def answer(text: str = "Employees receive 27 days of paid annual leave [1].") -> Answer:
    hit = SearchHit("c1", "doc-1", "handbook.md", ("Leave",), 2, 10, 10 + len(LEAVE), LEAVE,
                    0.8)  # fmt: skip
    sources = canonical_order([hit])
    checked = check_citations(text, sources)
    return Answer(checked.text, checked.cited, tuple(sources), False, 0, Usage(100, 64, 12),
                  "stop", checked.statements, {"total": 1.5})  # fmt: skip


def test_chat_completion_conforms_to_openais_schema_with_url_citations():
    body = api.chat_completion(answer(), "chatcmpl-1", 1700000000, FILES)
    completion = conforms(ChatCompletion, json.loads(json.dumps(body)))
    [annotation] = completion.choices[0].message.annotations
    assert annotation.type == "url_citation"
    cited = annotation.url_citation
    text = completion.choices[0].message.content
    assert text[cited.start_index : cited.end_index] == text  # the one citing sentence
    assert cited.url == f"{FILES}/doc-1/content?format=text#char=10,{10 + len(LEAVE)}"
    assert cited.title == "handbook.md, page 2: Leave"
    assert completion.usage.model_dump(exclude_none=True) == {
        "prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112,
        "prompt_tokens_details": {"cached_tokens": 64}}  # fmt: skip
    citation = body["grounded"]["citations"][0]
    assert citation["chunk_id"] == "c1" and citation["score"] == 0.8


def test_each_citing_sentence_gets_its_own_span():
    text = "Hello there. Leave is 27 days [1] of paid annual leave. Thanks."
    annotations = api.chat_completion(answer(text), "c", 0, FILES)["choices"][0]["message"][
        "annotations"
    ]
    spans = [(a["url_citation"]["start_index"], a["url_citation"]["end_index"])
             for a in annotations]  # fmt: skip
    assert [text[a:b] for a, b in spans] == ["Leave is 27 days [1] of paid annual leave."]


def test_stream_chunks_conform_and_carry_the_same_annotations():
    message = api.chat_completion(answer(), "c", 0, FILES)["choices"][0]["message"]
    chunks = api.final_chunks(answer(), "chatcmpl-1", 0, include_usage=True, files_url=FILES)
    for payload in [api.chunk("chatcmpl-1", 0, {"role": "assistant", "content": ""}), *chunks]:
        chunk_conforms(json.loads(json.dumps(payload)))
    assert chunks[0]["choices"][0]["finish_reason"] == "stop"
    assert chunks[0]["choices"][0]["delta"]["annotations"] == message["annotations"]
    assert chunks[1]["choices"] == [] and chunks[1]["usage"]["completion_tokens"] == 12


def test_the_strict_check_refuses_the_old_file_citation_shape():
    body = api.chat_completion(answer(), "c", 0, FILES)
    body["choices"][0]["message"]["annotations"] = [
        {"type": "file_citation", "file_id": "doc-1", "filename": "handbook.md", "index": 3}
    ]
    with pytest.raises(pydantic.ValidationError):
        conforms(ChatCompletion, body)
    body = api.chat_completion(answer(), "c", 0, FILES)
    body["choices"][0]["message"]["sources"] = []
    with pytest.raises(AssertionError, match="does not define"):
        conforms(ChatCompletion, body)


def test_search_page_conforms_to_the_spec_and_adds_provenance_only_when_asked():
    judged = SearchHit("c1", "doc-1", "handbook.md", ("Leave",), 2, 0, 5, "Leave", 0.5,
                       rerank_score=6.8)  # fmt: skip
    dense = SearchHit("c2", "doc-1", "handbook.md", (), None, 5, 9, "Days", 0.42)
    page = objects.search_page("leave", [judged, dense], {"doc-1": {"site": "lyon"}})
    spec_conforms(SEARCH, page)
    assert page["search_query"] == ["leave"]
    for item in page["data"]:
        conforms(VectorStoreSearchResponse, item)
    # The judge's logit through the logistic function; a cosine as it is.
    logistic = 1 / (1 + math.exp(-6.8))
    assert [item["score"] for item in page["data"]] == [pytest.approx(logistic), 0.42]
    asked = objects.search_page("leave", [judged], {}, provenance=True)
    assert asked["data"][0]["grounded"] == {
        "chunk_id": "c1", "start": 0, "end": 5, "page": 2, "heading_path": ["Leave"],
        "raw_score": 6.8}  # fmt: skip
    with pytest.raises(NotConforming, match="grounded"):  # the spec closes the result object
        spec_conforms(SEARCH, asked)


def test_embeddings_in_both_encodings():
    vectors = np.array([[0.5, -1.0], [0.25, 2.0]], dtype=np.float32)
    plain = objects.embeddings(vectors, "float", 7, "grounded")
    assert plain["data"][1]["embedding"] == [0.25, 2.0] and plain["usage"]["total_tokens"] == 7
    packed = objects.embeddings(vectors, "base64", 7, "grounded")["data"][0]["embedding"]
    assert np.frombuffer(base64.b64decode(packed), dtype="<f4").tolist() == [0.5, -1.0]
    with pytest.raises(InvalidRequestError, match="non-empty strings"):
        api.parse(api.EmbeddingRequest, {"input": ["ok", " "]}).texts()
