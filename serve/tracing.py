"""OpenTelemetry tracing: each request's stages as spans sharing one trace and request id.

Off by default (`serve.tracing.exporter: none`: the API's no-op tracer, no cost). `console`
prints finished spans to stderr (the replica's log); `otlp` sends them to an OpenTelemetry
collector at `serve.tracing.endpoint` (OTLP over HTTP, e.g. http://collector:4318/v1/traces).
"""

from __future__ import annotations

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
