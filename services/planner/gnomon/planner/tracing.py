"""The planner's spans (docs/tracing.md): one ``gnomon.plan`` span per planning step (or release
step) that found schedules to work on; every occurrence job the step writes gets a
``gnomon.job.create`` span, the root of the job's own trace, with a link to that step's span
(:func:`gnomon.common.tracing.stamp_occurrences`). Callers check :data:`gnomon.common.tracing.ENABLED`
first; with tracing off nothing here runs.
"""

from __future__ import annotations

from opentelemetry.trace import Link, Span

from gnomon.common import tracing
from gnomon.common.domain.jobs import JobRow


def start_step(start_ns: int, schedules: int, kind: str = "plan") -> Span:
    """The ``gnomon.plan`` span of a step that began at ``start_ns`` (epoch ns) over ``schedules``
    schedules; ``kind`` (attribute ``gnomon.step``): ``plan`` (due rules) or ``release`` (buffered
    occurrences let go). The caller ends it."""
    return tracing.tracer().start_span(
        "gnomon.plan", attributes={"gnomon.schedules": schedules, "gnomon.step": kind}, start_time=start_ns
    )


def stamp_occurrences(step: Span, jobs: list[JobRow]) -> None:
    """Gives every occurrence row of ``jobs`` (about to be inserted) a new trace whose root links to
    ``step``; records how many on the step (``gnomon.jobs``)."""
    tracing.stamp_occurrences(jobs, links=[Link(step.get_span_context())])
    step.set_attribute("gnomon.jobs", len(jobs))
