"""Schema-driven fuzzing of the running appliance: schemathesis generates requests for every
route from the OpenAPI document the appliance serves (valid ones and invalid ones), sends them
with a tenant's key, and every response must be no server error, with a documented status and
media type and a body valid against the documented schema (serve/openapi.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from serve.budgets import Budget
from tests.appliances import with_handbook

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Per route and mode (valid, invalid); a route without inputs has one. The HTTP layer alone is
# fuzzed with more in-process (tests/unit/serve/test_http_fuzz.py).
EXAMPLES_PER_ROUTE = 30


@pytest.fixture(scope="module")
def fuzzed(shared_appliance):
    """The shared appliance with a tenant of its own holding a document, and that tenant's
    key (answers capped at 16 tokens, so that generated max_tokens values cost no time)."""
    running, config = shared_appliance
    secret, _ = with_handbook(running, config, "fuzz", Budget(max_completion_tokens=16))
    return running, secret


def test_generated_requests_get_documented_answers_and_no_server_error(fuzzed):
    """Every route, valid and invalid requests (schemathesis's strategies driven by
    Hypothesis here: its pytest plugin does not run under pytest 9)."""
    running, secret = fuzzed
    base = running.api_url.removesuffix("/v1")
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    sent: Counter[str] = Counter()

    def run(strategy) -> None:
        @settings(max_examples=EXAMPLES_PER_ROUTE, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=strategy)
        def fuzz(case):
            response = case.call(
                base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=120
            )
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
        if operation.path == "/v1/chat/completions":  # also past the checks a schema can't say
            before = sent["2xx"]
            run(st.tuples(operation.as_strategy(), st.text(min_size=1)).map(_askable))
            answered = sent["2xx"] - before
    routes = {f"{op.method.upper()} {op.path}" for op in operations}
    assert routes == {name for name in sent if " " in name}
    assert sum(count for name, count in sent.items() if " " in name) >= 10 * len(routes), sent
    assert sent["5xx"] == 0 and sent["4xx"] > 0, sent
    assert answered >= EXAMPLES_PER_ROUTE // 2, (answered, sent)  # most askable ones answered
    print(dict(sent))  # the figures for the record (pytest -s)


def _askable(drawn):
    """A generated chat request whose last message is a user's question and whose answer
    fits the key's budget: what the schema cannot express, so that the fuzzing also reaches
    retrieval, the generator and streaming."""
    case, question = drawn
    body = case.body
    body["messages"] = [*body["messages"][:-1], {"role": "user", "content": question}]
    for field in ("max_tokens", "max_completion_tokens"):
        if body.get(field) is not None:
            body[field] = 1 + body[field] % 16
    return case
