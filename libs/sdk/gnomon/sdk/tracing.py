"""OpenTelemetry in the SDK (opentelemetry-api only; the application installs and configures the
SDK and exporters it wants, docs/tracing.md).

Worker: when an assignment carries a trace context (``Assignment.trace_context``, set when the job
is traced and the dispatcher exports traces), the handler runs inside a ``gnomon.handler`` span
(kind CONSUMER) whose parent is that context, made with the global tracer provider, so spans the
handler starts nest under it; the span records an exception the handler raises. Without a
registered provider (the API's default) the span is a no-op, and an assignment without a trace
context costs one check.

Client: :func:`outgoing_metadata` adds the W3C ``traceparent`` / ``tracestate`` of the caller's
current span to a call's metadata, so a job created inside a span joins that trace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .context import JobContext

__all__ = ["traced_handler", "outgoing_metadata", "HANDLER_SPAN"]

#: Name of the span a traced handler runs in.
HANDLER_SPAN = "gnomon.handler"

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("gnomon.sdk")  # a proxy: follows the provider the application sets later


def _attributes(ctx: JobContext) -> dict[str, Any]:
    return {
        "gnomon.job": ctx.job,
        "gnomon.attempt": ctx.attempt,
        "gnomon.queue": ctx.queue,
        "gnomon.namespace": ctx.namespace,
        "gnomon.fencing_token": ctx.fencing_token,
    }


def _parent(ctx: JobContext) -> Context:
    return _PROPAGATOR.extract(ctx.trace_context, context=Context())


def traced_handler(handler: Callable[[JobContext], Any], *, is_async: bool) -> Callable[[JobContext], Any]:
    """``handler`` wrapped so that an attempt with a trace context runs it inside a
    ``gnomon.handler`` span continuing that context (plain handlers: in the handler's thread; async
    ones: in the handler's task). An attempt without one calls ``handler`` directly."""
    if is_async:

        async def run_async(ctx: JobContext) -> Any:
            with _TRACER.start_as_current_span(
                HANDLER_SPAN, context=_parent(ctx), kind=SpanKind.CONSUMER, attributes=_attributes(ctx)
            ):
                return await handler(ctx)

        def start(ctx: JobContext) -> Awaitable[Any] | Any:
            return run_async(ctx) if ctx.trace_context else handler(ctx)

        return start

    def run(ctx: JobContext) -> Any:
        if not ctx.trace_context:
            return handler(ctx)
        with _TRACER.start_as_current_span(
            HANDLER_SPAN, context=_parent(ctx), kind=SpanKind.CONSUMER, attributes=_attributes(ctx)
        ):
            return handler(ctx)

    return run


def outgoing_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``metadata`` plus the W3C trace context of the current span when there is a valid one
    (else ``metadata`` unchanged)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return metadata
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return (*metadata, *carrier.items())
