"""Schema-driven fuzzing of the HTTP layer in-process (serve/http/app.py over the real Gateway and
the stand-ins of test_http.py): schemathesis generates valid and invalid requests for every
route from the OpenAPI document the app serves; every response must be no server error, with
a documented status and media type and a body valid against the documented schema. Many
examples per route here, at milliseconds each; test_fuzz.py sends fewer through the real
stack (Ray, the deployments, vLLM)."""

from __future__ import annotations

import pytest
import schemathesis

from tests.fuzzing import Fuzzer
from tests.unit.serve.test_http import auth, upload, world  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow  # in-process, but some 40 s: not in the unit tier

EXAMPLES_PER_ROUTE = 50  # per route and mode (valid, invalid)


def test_generated_requests_get_documented_answers_and_no_server_error(world):  # noqa: F811
    build, secrets = world
    client = build()
    assert upload(client, secrets["acme"]).status_code == 200
    fuzzer = Fuzzer(lambda case: case.call(headers=auth(secrets["acme"])), EXAMPLES_PER_ROUTE)
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    routes = {f"{op.method.upper()} {op.path}" for op in fuzzer.every_route(schema)}
    assert routes == fuzzer.routes()
    sent = fuzzer.sent
    assert sent["5xx"] == 0 and sent["4xx"] > 0 and sent["2xx"] > 0, sent
