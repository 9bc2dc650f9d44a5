"""The OpenAPI document the appliance serves at /openapi.json (the ingress app, without Ray
running): request bodies are declared, so /docs, client generators and schema-driven tools
know them."""

import pytest

pytestmark = pytest.mark.integration


def test_the_openapi_document_describes_every_request_body():
    from serve.http.app import create_app

    app = create_app(None)

    paths = app.openapi()["paths"]
    for path in ("/v1/chat/completions", "/v1/embeddings",
                 "/v1/vector_stores/{store_id}/search", "/v1/files"):  # fmt: skip
        assert "requestBody" in paths[path]["post"], path
    chat = paths["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
    assert chat["schema"]["$ref"].endswith("/ChatRequest")
