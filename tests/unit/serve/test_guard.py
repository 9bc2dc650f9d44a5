import pytest

from index.errors import AuthenticationError
from serve.http import api
from serve.http.guard import JSON_BODY_LIMIT, BodyTooLargeError, LengthRequiredError, RequestGuard
from serve.identity.keys import KeyStore

pytestmark = pytest.mark.unit


@pytest.fixture
def guard(tmp_path):
    keys = KeyStore(tmp_path)
    _, secret = keys.create("acme", ["ingest"])
    return RequestGuard(keys, upload_limit=1000), {"authorization": f"Bearer {secret}"}


def test_the_key_is_checked_before_any_body_is_read(guard):
    guard, _ = guard
    with pytest.raises(AuthenticationError, match="missing API key"):
        guard.check("POST", "/v1/files", {"content-length": str(600 * 2**20)})
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        guard.check("GET", "/v1/anything", {"authorization": "Bearer gk-nope"})
    guard.check("GET", "/health", {})  # public


def test_bodies_over_the_limit_or_without_a_length_are_refused_unread(guard):
    guard, auth = guard
    guard.check("POST", "/v1/files", {**auth, "content-length": "1500"})  # file + form overhead
    with pytest.raises(BodyTooLargeError, match=r"max_bytes = 1,000 bytes per file") as big:
        guard.check("POST", "/v1/files", {**auth, "content-length": str(600 * 2**20)})
    assert api.error_body(big.value)["error"]["type"] == "invalid_request_error"
    assert big.value.status == 413
    with pytest.raises(BodyTooLargeError):
        guard.check("POST", "/v1/chat/completions",
                    {**auth, "content-length": str(JSON_BODY_LIMIT + 1)})  # fmt: skip
    with pytest.raises(LengthRequiredError) as chunked:
        guard.check("POST", "/v1/embeddings", auth)
    assert chunked.value.status == 411
    assert guard.check("GET", "/v1/files", auth).tenant == "acme"  # no body, no length needed
    assert guard.check("GET", "/health", {}) is None


def test_chat_parameters_are_validated_and_tools_refused():
    base = {"model": "grounded", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(api.InvalidRequestError, match="temperature"):
        api.parse(api.ChatRequest, {**base, "temperature": "hot"})
    with pytest.raises(api.InvalidRequestError, match=r"tools .* not supported"):
        api.parse(api.ChatRequest, {**base, "tools": [{"type": "function"}]})
    assert api.parse(api.ChatRequest, {**base, "temperature": 0.2, "tools": []}).temperature == 0.2
