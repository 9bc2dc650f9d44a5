"""Schema-driven fuzzing of the running appliance: schemathesis generates requests for every
route from the OpenAPI document the appliance serves (valid ones and invalid ones), sends them
with a tenant's key, and every response must be no server error, with a documented status and
media type and a body valid against the documented schema (serve/openapi.py)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import strategies as st

from serve.budgets import Budget
from tests.appliances import with_handbook
from tests.fuzzing import Fuzzer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Per route and mode (valid, invalid); a route without inputs has one. The HTTP layer alone is
# fuzzed with more in-process (tests/unit/serve/test_http_fuzz.py: 50); here the point is that
# the real stack behind it answers as documented, and each example is a round trip through it.
EXAMPLES_PER_ROUTE = 15


@pytest.fixture(scope="module")
def fuzzed(shared_appliance):
    """The shared appliance with a tenant of its own holding a document, and that tenant's
    key (answers capped at 16 tokens, so that generated max_tokens values cost no time)."""
    running, config = shared_appliance
    secret, _ = with_handbook(running, config, "fuzz", Budget(max_completion_tokens=16))
    return running, secret


def test_generated_requests_get_documented_answers_and_no_server_error(fuzzed):
    """Every route, valid and invalid requests (tests/fuzzing.py)."""
    running, secret = fuzzed
    base = running.api_url.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {secret}"}
    fuzzer = Fuzzer(lambda case: case.call(base_url=base, headers=headers, timeout=120),
                    EXAMPLES_PER_ROUTE)  # fmt: skip
    sent, routes = fuzzer.sent, set()
    for operation in fuzzer.every_route(schemathesis.openapi.from_url(base + "/openapi.json")):
        routes.add(f"{operation.method.upper()} {operation.path}")
        if operation.path == "/v1/chat/completions":  # also past the checks a schema can't say
            before = sent["2xx"]
            fuzzer.run(st.tuples(operation.as_strategy(), st.text(min_size=1)).map(_askable))
            answered = sent["2xx"] - before
    assert routes == fuzzer.routes()
    assert fuzzer.requests() >= 10 * len(routes), sent
    assert sent["5xx"] == 0 and sent["4xx"] > 0, sent
    assert answered >= EXAMPLES_PER_ROUTE // 2, (answered, sent)  # most askable ones answered
    print(dict(sent))  # the figures for the record (pytest -s)


def _askable(drawn):
    """A generated chat request whose last message is a user's question and whose answer
    fits the key's budget: what the schema cannot express, so that the fuzzing also reaches
    retrieval, the generator and streaming."""
    case, question = drawn
    body = case.body
    body["model"] = "grounded"  # the schema describes the served models; it cannot list them
    body["messages"] = [*body["messages"][:-1], {"role": "user", "content": question}]
    for field in ("max_tokens", "max_completion_tokens"):
        if body.get(field) is not None:
            body[field] = 1 + body[field] % 16
    return case
