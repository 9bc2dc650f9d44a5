"""Schema-driven fuzzing with schemathesis's strategies driven by Hypothesis (its pytest plugin
does not run under pytest 9): every response must be no server error, with a documented status
and media type and a body valid against the documented schema (serve/http/openapi.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip


class Fuzzer:
    """Sends ``examples`` generated cases per strategy with ``call(case) -> response`` and
    counts them in ``sent``: by route ("POST /v1/files") and by status class ("4xx")."""

    def __init__(self, call: Callable, examples: int) -> None:
        self.call, self.examples = call, examples
        self.sent: Counter[str] = Counter()

    def run(self, strategy) -> None:
        @settings(max_examples=self.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=strategy)
        def fuzz(case):
            response = self.call(case)
            self.sent[f"{case.method} {case.path}"] += 1
            self.sent[f"{response.status_code // 100}xx"] += 1
            case.validate_response(response, checks=CHECKS)

        fuzz()

    def every_route(self, schema) -> Iterator:
        """Valid and invalid requests for every operation of ``schema``; yields each
        operation once it is done (a caller may fuzz it further)."""
        for operation in (result.ok() for result in schema.get_all_operations()):
            for mode in GenerationMode:
                try:
                    self.run(operation.as_strategy(generation_mode=mode))
                except Unsatisfiable:  # no input to make invalid (GET /health, GET /v1/files)
                    assert mode is GenerationMode.NEGATIVE, operation
            yield operation

    def routes(self) -> set[str]:
        return {name for name in self.sent if " " in name}

    def requests(self) -> int:
        return sum(count for name, count in self.sent.items() if " " in name)
