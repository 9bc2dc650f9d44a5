"""Schema-driven fuzzing of the HTTP layer in-process (serve/app.py over the real Gateway and
the stand-ins of test_http.py): schemathesis generates valid and invalid requests for every
route from the OpenAPI document the app serves; every response must be no server error, with
a documented status and media type and a body valid against the documented schema. Many
examples per route here, at milliseconds each; test_fuzz.py sends fewer through the real
stack (Ray, the deployments, vLLM)."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.unit.serve.test_http import auth, upload, world  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow  # in-process, but some 40 s: not in the unit tier

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip
EXAMPLES_PER_ROUTE = 50  # per route and mode (valid, invalid)


def test_generated_requests_get_documented_answers_and_no_server_error(world):  # noqa: F811
    build, secrets = world
    client = build()
    assert upload(client, secrets["acme"]).status_code == 200
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    sent: Counter[str] = Counter()

    def run(strategy) -> None:
        @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=strategy)
        def fuzz(case):
            response = case.call(headers=auth(secrets["acme"]))
            sent[f"{case.method} {case.path}"] += 1
            sent[f"{response.status_code // 100}xx"] += 1
            case.validate_response(response, checks=CHECKS)

        fuzz()

    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        for mode in GenerationMode:
            try:
                run(operation.as_strategy(generation_mode=mode))
            except Unsatisfiable:  # no input to make invalid (GET /health, GET /v1/files)
                assert mode is GenerationMode.NEGATIVE, operation
    routes = {f"{op.method.upper()} {op.path}" for op in operations}
    assert routes == {name for name in sent if " " in name}
    assert sent["5xx"] == 0 and sent["4xx"] > 0 and sent["2xx"] > 0, sent
