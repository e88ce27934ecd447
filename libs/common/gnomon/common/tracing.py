"""Traces with OpenTelemetry: the per-process tracer provider and the W3C trace context kept with a job.

A service's ``main`` calls :func:`setup` once with its name (``api``, ``planner``, ``dispatcher``,
``reaper``). With ``GNOMON_TRACES_EXPORTER=none`` (the default) it does nothing and :data:`ENABLED`
stays False: every hook in the services is one check of that module-level boolean, so with tracing
off a job costs no span, no context parsing and no stored context. Otherwise it installs a
:class:`~opentelemetry.sdk.trace.TracerProvider` (resource ``service.name`` ``gnomon-<service>``
unless ``OTEL_SERVICE_NAME`` says otherwise) with a batch span processor feeding the chosen exporter:
``otlp`` (OTLP/gRPC to ``GNOMON_OTLP_ENDPOINT``, plaintext unless ``GNOMON_OTLP_INSECURE=0``),
``console`` (one JSON span per line on stdout) or ``file`` (one JSON span per line appended to
``GNOMON_TRACES_FILE``). The batch processor honours the standard ``OTEL_BSP_*`` variables.

A job's trace context is stored in ``jobs.trace_context`` as text: the W3C ``traceparent``, then,
if there is one, a newline and the ``tracestate`` (:func:`encode` / :func:`decode`). docs/tracing.md
lists the spans and their attributes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gnomon.common.domain.jobs import JobRow, NewJob
from gnomon.common.names import job_name, schedule_name
from gnomon.common.tracing_settings import TracesSettings

__all__ = [
    "ENABLED",
    "setup",
    "tracer",
    "encode",
    "decode",
    "context_of",
    "carrier_of",
    "stored_context",
    "wire_context",
    "creating",
    "caller",
    "stamp_occurrences",
    "Link",
    "SpanKind",
    "StatusCode",
]

#: True once :func:`setup` installed an exporter: the one check every tracing hook makes first.
ENABLED = False

_PROPAGATOR = TraceContextTextMapPropagator()
#: Longest ``traceparent`` / ``tracestate`` accepted from a caller, characters.
_MAX_PARENT, _MAX_STATE = 128, 1024
_TRACER: trace.Tracer = trace.NoOpTracer()
_PROVIDER: TracerProvider | None = None

#: Attribute names of Gnomon's spans (docs/tracing.md).
JOB, ATTEMPT, QUEUE, NAMESPACE = "gnomon.job", "gnomon.attempt", "gnomon.queue", "gnomon.namespace"
TOKEN, WORKER, FAILURE_CLASS = "gnomon.fencing_token", "gnomon.worker_id", "gnomon.failure_class"
SCHEDULE, NOMINAL_TIME = "gnomon.schedule", "gnomon.nominal_time"


def _json_line(span: ReadableSpan) -> str:
    line: str = span.to_json(indent=None)
    return line + "\n"


def _exporter(s: TracesSettings) -> SpanExporter:
    if s.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        from gnomon.common.config import TelemetrySettings

        otlp = TelemetrySettings()
        if not otlp.endpoint.strip():
            raise ValueError("GNOMON_TRACES_EXPORTER=otlp needs GNOMON_OTLP_ENDPOINT (host:port)")
        return OTLPSpanExporter(endpoint=otlp.endpoint.strip(), insecure=otlp.insecure, timeout=5)
    if s.exporter == "file":
        if not s.file:
            raise ValueError("GNOMON_TRACES_EXPORTER=file needs GNOMON_TRACES_FILE")
        return JsonLinesFileExporter(s.file)
    return ConsoleSpanExporter(formatter=_json_line)


class JsonLinesFileExporter(SpanExporter):
    """Appends spans to ``path``, one JSON object per line (``ReadableSpan.to_json``). Each batch is
    one ``write`` on an ``O_APPEND`` descriptor, so several processes may share the file (``gnomon
    dev`` gives all its services one) without interleaving lines."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Writes ``spans``; FAILURE once shut down or when the write fails."""
        if self._fd is None:
            return SpanExportResult.FAILURE
        try:
            os.write(self._fd, "".join(_json_line(sp) for sp in spans).encode())
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Closes the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def setup(service: str, settings: TracesSettings | None = None) -> bool:
    """Installs this process's tracer provider for ``service`` (``api``, ``planner``, ``dispatcher``,
    ``reaper``) as ``GNOMON_TRACES_*`` say, also as the global provider; returns :data:`ENABLED`.
    Call once, before serving. Raises ``ValueError`` for an exporter without its destination (otlp
    without ``GNOMON_OTLP_ENDPOINT``, file without ``GNOMON_TRACES_FILE``)."""
    global ENABLED, _TRACER, _PROVIDER
    s = settings or TracesSettings()
    if s.exporter == "none":
        return False
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": f"gnomon-{service}"}
    provider = TracerProvider(
        resource=Resource.create(attrs), sampler=ParentBased(TraceIdRatioBased(s.sample_ratio))
    )
    provider.add_span_processor(BatchSpanProcessor(_exporter(s)))
    trace.set_tracer_provider(provider)
    _PROVIDER, _TRACER, ENABLED = provider, provider.get_tracer("gnomon"), True
    return True


def shutdown() -> None:
    """Exports the spans still buffered and stops exporting (also done at interpreter exit)."""
    if _PROVIDER is not None:
        _PROVIDER.shutdown()


def tracer() -> trace.Tracer:
    """Gnomon's tracer (a no-op one until :func:`setup` enabled tracing)."""
    return _TRACER


def encode(carrier: Mapping[str, str]) -> str | None:
    """The stored form of a W3C carrier (``traceparent`` [+ ``tracestate``]); None without a traceparent."""
    parent = carrier.get("traceparent")
    if not parent:
        return None
    state = carrier.get("tracestate")
    return f"{parent}\n{state}" if state else parent


def decode(stored: str | None) -> dict[str, str]:
    """The W3C carrier (``{"traceparent": ..., "tracestate": ...}``) of a stored context; {} for None."""
    if not stored:
        return {}
    parent, _, state = stored.partition("\n")
    return {"traceparent": parent, "tracestate": state} if state else {"traceparent": parent}


def context_of(stored: str | None) -> Context:
    """The OpenTelemetry context holding the (remote) span of a stored context; an empty context
    (a new trace) for None or an unparsable value."""
    return _PROPAGATOR.extract(decode(stored), context=Context())


def carrier_of(metadata: Sequence[tuple[str, str | bytes]] | None) -> Context | None:
    """The context of the ``traceparent``/``tracestate`` gRPC metadata of a call (None: not sent)."""
    if not metadata:
        return None
    carrier = {
        k: v if isinstance(v, str) else v.decode("ascii", "replace")
        for k, v in metadata
        if k in ("traceparent", "tracestate")
    }
    if len(carrier.get("traceparent", "")) > _MAX_PARENT:
        return None  # not a traceparent any version knows: start a new trace
    if len(carrier.get("tracestate", "")) > _MAX_STATE:
        carrier.pop("tracestate")  # W3C: at most 32 members of 256 chars; drop an oversized one
    if "traceparent" not in carrier:
        return None
    return _PROPAGATOR.extract(carrier, context=Context())


def stored_context(span: Span) -> str | None:
    """The stored form (see :func:`encode`) of ``span``'s context; None for an invalid span."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span, Context()))
    return encode(carrier)


def wire_context(span: Span) -> dict[str, str]:
    """``span``'s context as a W3C carrier (the ``Assignment.trace_context`` map); {} if invalid."""
    carrier: dict[str, str] = {}
    if span.get_span_context().is_valid:
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span, Context()))
    return carrier


@contextmanager
def creating(
    metadata: Sequence[tuple[str, str | bytes]] | None, new_jobs: list[NewJob]
) -> Iterator[list[NewJob]]:
    """Around the insert of ``new_jobs`` (the API's CreateJob / BatchCreateJobs): one
    ``gnomon.job.create`` span per job, a child of the caller's context when the call's gRPC
    ``metadata`` carries a ``traceparent`` (else the root of a new trace); yields the jobs with
    ``trace_context`` set to their span's context. A span ends when the block does, with an error
    status if it raised. With tracing off it yields ``new_jobs`` unchanged and makes no span."""
    if not ENABLED:
        yield new_jobs
        return
    parent = carrier_of(metadata)
    spans = [
        _TRACER.start_span(
            "gnomon.job.create",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={JOB: job_name(n.namespace, n.id), NAMESPACE: n.namespace, QUEUE: n.queue},
        )
        for n in new_jobs
    ]
    try:
        yield [replace(n, trace_context=stored_context(s)) for n, s in zip(new_jobs, spans, strict=True)]
    except BaseException as exc:
        for s in spans:
            s.record_exception(exc)
            s.set_status(StatusCode.ERROR, type(exc).__name__)
        raise
    finally:
        for s in spans:
            s.end()


@contextmanager
def caller(metadata: Sequence[tuple[str, str | bytes]] | None) -> Iterator[None]:
    """Makes the caller's context (the ``traceparent`` of a call's gRPC ``metadata``) the current
    OpenTelemetry context for the block, so spans started inside it (e.g. by
    :func:`stamp_occurrences`) are its children. Does nothing with tracing off or no ``traceparent``."""
    parent = carrier_of(metadata) if ENABLED else None
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


def stamp_occurrences(jobs: Sequence[JobRow], links: Sequence[Link] = ()) -> None:
    """Gives every occurrence row of ``jobs`` (``jobs`` rows about to be inserted) a
    ``gnomon.job.create`` span, a child of the current context (the root of a new trace when there is
    none, as in the planner) with ``links`` (the planner's: its step), and stores the span's context
    in the row's ``trace_context``. Call only while :data:`ENABLED`."""
    for j in jobs:
        ns = j["namespace"]
        attrs: dict[str, Any] = {JOB: job_name(ns, j["id"]), NAMESPACE: ns, QUEUE: j["queue"]}
        if j.get("schedule_id"):
            attrs[SCHEDULE] = schedule_name(ns, j["schedule_id"])
        if j.get("nominal_time") is not None:
            attrs[NOMINAL_TIME] = j["nominal_time"].isoformat()
        span = _TRACER.start_span("gnomon.job.create", links=links, attributes=attrs)
        j["trace_context"] = stored_context(span)
        span.end()
