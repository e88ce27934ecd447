"""Jobs: the list (filter by namespace, queue and state; pages) and one job's timeline
(scheduled -> dispatched -> started -> finished, with the dispatch lag) and attempts (worker,
fencing token, failure class, error), with cancel and reschedule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from starlette.responses import Response
from starlette.routing import Route

from gnomon.sdk.models import Job

from .web import Ctx, page, render

__all__ = ["routes", "timeline", "Step"]

STATES = ("SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "EXPIRED", "SKIPPED")


@dataclass(frozen=True)
class Step:
    """One step of a job's timeline: ``label``, the instant (None: not reached) and the span since
    the previous reached step (``delta_label`` names it, e.g. ``dispatch lag``)."""

    label: str
    at: datetime | None
    delta: timedelta | None
    delta_label: str


def timeline(job: Job) -> list[Step]:
    """The four steps of ``job``: scheduled (its schedule time), dispatched (dispatch lag = dispatch -
    schedule time), started (start - dispatch) and finished (run time = finish - start)."""
    points = [
        ("scheduled", job.schedule_time, ""),
        ("dispatched", job.dispatch_time, "dispatch lag"),
        ("started", job.start_time, "start delay"),
        ("finished", job.finish_time, "run time"),
    ]
    out: list[Step] = []
    prev: datetime | None = None
    for label, at, delta_label in points:
        delta = at - prev if at is not None and prev is not None else None
        out.append(Step(label, at, delta, delta_label))
        prev = at or prev
    return out


@page
async def jobs(ctx: Ctx) -> Response:
    """``GET /jobs?namespace=&queue=&state=&page_token=``: 50 jobs a page, newest first."""
    queue, state, token = ctx.field("queue"), ctx.field("state").upper(), ctx.field("page_token")
    items, next_token = await ctx.api.list_jobs_page(
        state=state or None, queue=queue or None, page_size=50, page_token=token
    )
    return render(
        ctx,
        "jobs.html",
        jobs=items,
        next_token=next_token,
        queue=queue,
        state=state,
        states=STATES,
        token=token,
    )


@page
async def job(ctx: Ctx) -> Response:
    """``GET /jobs/{job}``: the job, its timeline and every attempt."""
    j = await ctx.api.get_job(ctx.request.path_params["job"])
    attempts = await ctx.api.list_job_attempts(j.name)
    return render(ctx, "job.html", job=j, steps=timeline(j), attempts=attempts, now=datetime.now(UTC))


@page
async def cancel(ctx: Ctx) -> Response:
    """``POST /jobs/{job}/cancel``: cancels the job (CANCELLED, or CANCEL_REQUESTED when running)."""
    jid = ctx.request.path_params["job"]
    outcome, _ = await ctx.api.cancel_job(jid)
    return ctx.done(f"/jobs/{jid}", f"cancel: {outcome}")


@page
async def reschedule(ctx: Ctx) -> Response:
    """``POST /jobs/{job}/reschedule``: moves a SCHEDULED job to ``schedule_time`` (ISO 8601, UTC
    when it has no offset) or to ``delay`` seconds from now."""
    jid = ctx.request.path_params["job"]
    when, delay = ctx.field("schedule_time"), ctx.field("delay")
    if when:
        at = datetime.fromisoformat(when)
        j = await ctx.api.reschedule_job(jid, schedule_time=at if at.tzinfo else at.replace(tzinfo=UTC))
    elif delay:
        j = await ctx.api.reschedule_job(jid, delay=float(delay))
    else:
        raise ValueError("give a new schedule time or a delay in seconds")
    stamp = j.schedule_time.isoformat() if j.schedule_time else "-"
    return ctx.done(f"/jobs/{jid}", f"rescheduled to {stamp}")


routes = [
    Route("/jobs", jobs),
    Route("/jobs/{job}", job),
    Route("/jobs/{job}/cancel", cancel, methods=["POST"]),
    Route("/jobs/{job}/reschedule", reschedule, methods=["POST"]),
]
