"""Schema-driven fuzzing of the running appliance: schemathesis generates requests for every
route from the OpenAPI document the appliance serves (valid ones and invalid ones), sends them
with a tenant's key, and every response must be no server error, with a documented status and
media type and a body valid against the documented schema (serve/http/openapi.py)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import schemathesis
from hypothesis import strategies as st

from serve.accounting.budgets import Budget
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

    def send(case):
        return case.call(base_url=base, headers=headers, timeout=120)

    refused: Counter[str] = Counter()  # why askable requests were not answered

    def ask(case):
        """As the openai client does, a 429 is asked again after its Retry-After (the key's
        fair queue holds one request, and a slow host can still be settling the last)."""
        for _ in range(5):
            response = send(case)
            if response.status_code != 429:
                break
            time.sleep(min(float(response.headers.get("retry-after", 1)), 5))
        if response.status_code // 100 != 2:
            refused[f"{response.status_code} {response.text[:120]}"] += 1
        return response

    fuzzer, asker = Fuzzer(send, EXAMPLES_PER_ROUTE), Fuzzer(ask, EXAMPLES_PER_ROUTE)
    sent, routes = fuzzer.sent, set()
    for operation in fuzzer.every_route(schemathesis.openapi.from_url(base + "/openapi.json")):
        routes.add(f"{operation.method.upper()} {operation.path}")
        if operation.path == "/v1/chat/completions":  # also past the checks a schema can't say
            asker.run(st.tuples(operation.as_strategy(), st.text(min_size=1)).map(_askable))
    assert routes == fuzzer.routes()
    assert fuzzer.requests() >= 10 * len(routes), sent
    assert sent["5xx"] == 0 and sent["4xx"] > 0, sent
    answered = asker.sent["2xx"]
    assert asker.sent["5xx"] == 0, asker.sent
    assert answered >= EXAMPLES_PER_ROUTE // 2, (answered, dict(refused))  # most are answered
    print(dict(sent), dict(asker.sent), dict(refused))  # the figures for the record (pytest -s)


def _askable(drawn):
    """A generated chat request whose last message is a user's question and whose answer
    fits the key's budget: what the schema cannot express, so that the fuzzing also reaches
    retrieval, the generator and streaming."""
    case, question = drawn
    body = case.body
    body["model"] = "grounded"  # the schema describes the served models; it cannot list them
    # Tools and turns without text are refused on purpose (400, covered by the fuzzing above):
    # left out here, so that these requests reach the answer.
    for field in ("tools", "tool_choice", "functions", "function_call"):
        body.pop(field, None)
    earlier = [m for m in body["messages"][:-1] if isinstance(m.get("content"), str)]
    body["messages"] = [*earlier, {"role": "user", "content": question}]
    for field in ("max_tokens", "max_completion_tokens"):
        if body.get(field) is not None:
            body[field] = 1 + body[field] % 16
    return case
