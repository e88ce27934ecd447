"""The dispatcher's spans of one attempt (docs/tracing.md): ``gnomon.claim``, ``gnomon.deliver``,
``gnomon.accept`` and ``gnomon.result``, all in the trace of the job's stored context.

Callers check :data:`gnomon.common.tracing.ENABLED` before calling anything here, and every function
skips attempts whose job has no stored context (``Claimed.trace_context`` None), so with tracing off
a claim, a delivery, an accept and a result cost one boolean check each.

The tree of one attempt: ``gnomon.claim`` is a child of the job's create span; ``gnomon.deliver`` a
child of the claim (of the create span for a re-delivery from the outbox), and its context travels
in ``Assignment.trace_context``; ``gnomon.accept``, the worker's ``gnomon.handler`` and
``gnomon.result`` are children of the delivery. The contexts between those steps are kept in memory,
per attempt, by this process (at most :data:`MAX_KEPT` of each); a result that reaches a dispatcher
that did not deliver the attempt gets no span.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common import tracing
from gnomon.common.domain.attempts import Claimed, Result
from gnomon.common.names import job_name

#: Most contexts kept per step (claimed-not-delivered, delivered-not-finished); the oldest is
#: forgotten first (its later spans then hang off the job's create span, or are not made).
MAX_KEPT = 100_000

_Key = tuple[uuid.UUID, int]
_claims: dict[_Key, Context] = {}
_deliveries: dict[_Key, Context] = {}


def _keep(d: dict[_Key, Context], key: _Key, span: Span) -> None:
    d[key] = trace.set_span_in_context(span, Context())
    if len(d) > MAX_KEPT:
        d.pop(next(iter(d)))


def _attrs(c: Claimed) -> dict[str, str | int]:
    return {
        tracing.JOB: job_name(c.namespace, c.job_id),
        tracing.ATTEMPT: c.attempt,
        tracing.QUEUE: c.queue,
        tracing.NAMESPACE: c.namespace,
        tracing.TOKEN: c.token,
    }


def claimed(items: Sequence[Claimed], start_ns: int, dispatcher_id: str) -> None:
    """One ``gnomon.claim`` span per traced attempt of a committed claim, from ``start_ns`` (epoch
    ns, when the claim transaction began) to now."""
    tracer = tracing.tracer()
    for c in items:
        if c.trace_context is None:
            continue
        span = tracer.start_span(
            "gnomon.claim",
            context=tracing.context_of(c.trace_context),
            attributes={**_attrs(c), "gnomon.dispatcher": dispatcher_id},
            start_time=start_ns,
        )
        span.end()
        _keep(_claims, (c.job_id, c.attempt), span)


def delivered(items: Sequence[Claimed], assignments: Sequence[wpb.Assignment], worker_id: str) -> None:
    """One ``gnomon.deliver`` span per traced attempt handed to the stream of ``worker_id``; writes
    its context into the attempt's ``Assignment.trace_context`` (``assignments`` match ``items``)."""
    tracer = tracing.tracer()
    for c, a in zip(items, assignments, strict=True):
        if c.trace_context is None:
            continue
        key = (c.job_id, c.attempt)
        parent = _claims.pop(key, None) or tracing.context_of(c.trace_context)
        span = tracer.start_span(
            "gnomon.deliver",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes={**_attrs(c), tracing.WORKER: worker_id},
        )
        a.trace_context.update(tracing.wire_context(span))
        span.end()
        _keep(_deliveries, key, span)


def accepted(c: Claimed | None, worker_id: str, start_ns: int, ok: bool) -> None:
    """The ``gnomon.accept`` span of an accept received at ``start_ns`` (epoch ns) and answered now
    (``ok``: applied; else refused, an error status). Nothing for an attempt this process did not
    deliver (``c`` None) or that is not traced."""
    if c is None or c.trace_context is None:
        return
    parent = _deliveries.get((c.job_id, c.attempt))
    if parent is None:
        return
    span = tracing.tracer().start_span(
        "gnomon.accept",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={**_attrs(c), tracing.WORKER: worker_id},
        start_time=start_ns,
    )
    if not ok:
        span.set_status(StatusCode.ERROR, "STALE_ATTEMPT")
    span.end()


def finished(c: Claimed | None, res: Result | None, worker_id: str, start_ns: int, reason: str) -> None:
    """The ``gnomon.result`` span of a result received at ``start_ns`` (epoch ns) and answered now
    with refusal ``reason`` ("" applied): attributes ``gnomon.outcome`` (SUCCEEDED or FAILED) and,
    for a failure, ``gnomon.failure_class``; an error status for a failure or a refusal."""
    if c is None or c.trace_context is None:
        return
    parent = _deliveries.pop((c.job_id, c.attempt), None)
    if parent is None:
        return
    attrs: dict[str, str | int] = {**_attrs(c), tracing.WORKER: worker_id}
    if res is not None:
        attrs["gnomon.outcome"] = "SUCCEEDED" if res.succeeded else "FAILED"
        if not res.succeeded:
            attrs[tracing.FAILURE_CLASS] = str(res.failure_class)
    span = tracing.tracer().start_span(
        "gnomon.result", context=parent, kind=SpanKind.SERVER, attributes=attrs, start_time=start_ns
    )
    if reason:
        span.set_status(StatusCode.ERROR, reason)
    elif res is not None and not res.succeeded:
        span.set_status(StatusCode.ERROR, res.error[:200])
    span.end()
