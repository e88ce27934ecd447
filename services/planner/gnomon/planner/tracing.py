"""The planner's spans (docs/tracing.md): one ``gnomon.plan`` span per planning step that found due
schedules, and for every occurrence job the step writes a ``gnomon.job.create`` span, the root of
the job's own trace, with a link to that step's span. Callers check
:data:`gnomon.common.tracing.ENABLED` first; with tracing off nothing here runs.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Link, Span

from gnomon.common import tracing
from gnomon.common.domain.jobs import JobRow
from gnomon.common.names import job_name, schedule_name


def start_step(start_ns: int, schedules: int) -> Span:
    """The ``gnomon.plan`` span of a step that began at ``start_ns`` (epoch ns) over ``schedules``
    due schedules; the caller ends it."""
    return tracing.tracer().start_span(
        "gnomon.plan", attributes={"gnomon.schedules": schedules}, start_time=start_ns
    )


def stamp_occurrences(step: Span, jobs: list[JobRow] | list[dict[str, Any]]) -> None:
    """Gives every occurrence row of ``jobs`` (about to be inserted) a new trace: a
    ``gnomon.job.create`` root span linked to ``step``, whose context goes in the row's
    ``trace_context``."""
    link = [Link(step.get_span_context())]
    tracer = tracing.tracer()
    for j in jobs:
        ns = j["namespace"]
        attrs: dict[str, Any] = {
            tracing.JOB: job_name(ns, j["id"]),
            tracing.NAMESPACE: ns,
            tracing.QUEUE: j["queue"],
        }
        if j.get("schedule_id"):
            attrs[tracing.SCHEDULE] = schedule_name(ns, j["schedule_id"])
        if j.get("nominal_time") is not None:
            attrs[tracing.NOMINAL_TIME] = j["nominal_time"].isoformat()
        span = tracer.start_span(
            "gnomon.job.create", context=tracing.context_of(None), links=link, attributes=attrs
        )
        j["trace_context"] = tracing.stored_context(span)
        span.end()
    step.set_attribute("gnomon.jobs", len(jobs))
