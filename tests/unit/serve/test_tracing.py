import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from index.pipeline import SourceFile
from serve.query.pipeline import QueryConfig, QueryPipeline
from serve.query.retrieval import LocalSearcher
from serve.testing import ScriptedGenerator

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def spans():
    """The process's tracer provider can be set once: this module installs an in-memory one
    (the same thing serve.tracing.setup_tracing does with a real exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def test_each_stage_is_a_span_of_the_requests_trace(spans, fake_service):
    text = b"Annual leave is 27 days per calendar year for every employee."
    list(fake_service.pipeline("acme").ingest([SourceFile.from_bytes(text, "leave.txt")]))
    pipeline = QueryPipeline(LocalSearcher(fake_service), ScriptedGenerator("27 days [1]."),
                             QueryConfig(min_dense_score=0.0))  # fmt: skip
    spans.clear()
    asyncio.run(pipeline.answer("acme", "annual leave", request_id="req-42"))
    finished = {span.name: span for span in spans.get_finished_spans()}
    assert {"grounded.query", "grounded.condense", "grounded.retrieve", "grounded.prompt",
            "grounded.generate"} <= set(finished)  # fmt: skip
    root = finished["grounded.query"]
    assert root.attributes["grounded.request_id"] == "req-42"
    assert root.attributes["grounded.tenant"] == "acme"
    for name, span in finished.items():
        assert span.context.trace_id == root.context.trace_id
        if name != "grounded.query":
            assert span.parent.span_id == root.context.span_id
            assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    assert [e.name for e in finished["grounded.generate"].events] == ["first_token"]
