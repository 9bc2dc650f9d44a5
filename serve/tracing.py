"""OpenTelemetry tracing: each request's stages as spans sharing one trace and request id.

Off by default (`serve.tracing.exporter: none`: the API's no-op tracer, no cost). `console`
prints finished spans to stderr (the replica's log); `otlp` sends them to an OpenTelemetry
collector at `serve.tracing.endpoint` (OTLP over HTTP, e.g. http://collector:4318/v1/traces).
"""

from __future__ import annotations

import time
from typing import Literal

from opentelemetry import trace
from pydantic import BaseModel, ConfigDict

TRACER = "grounded"


class TracingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    exporter: Literal["none", "console", "otlp"] = "none"
    endpoint: str | None = None
    service_name: str = "grounded"


def setup_tracing(config: TracingConfig) -> None:
    """Install a tracer provider for this process (once; later calls are ignored by the API)."""
    if config.exporter == "none":
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if config.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else None
        exporter = exporter or OTLPSpanExporter()
    else:
        exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


class Stopwatch:
    """Seconds per named stage, in the order they ran; each stage is also an OpenTelemetry
    span under ``parent`` (a no-op unless tracing is configured, serve/tracing.py)."""

    def __init__(self, parent: trace.Span | None = None) -> None:
        self.timings: dict[str, float] = {}
        self.context = trace.set_span_in_context(parent) if parent is not None else None
        self._last = time.perf_counter()
        self._last_ns = time.time_ns()

    def lap(self, stage: str) -> None:
        now, now_ns = time.perf_counter(), time.time_ns()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - self._last
        span = tracer().start_span(f"grounded.{stage}", self.context, start_time=self._last_ns)
        span.end(end_time=now_ns)
        self._last, self._last_ns = now, now_ns
