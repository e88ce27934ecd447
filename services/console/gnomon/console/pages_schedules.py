"""Schedules: the list and one schedule's rule, zone and policies, its next fire times with their
DST notes (``PreviewSchedule``), and the decision record of every nominal time
(``ListScheduleOccurrences``), with pause, resume, trigger and backfill."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.responses import Response
from starlette.routing import Route

from gnomon.sdk import GnomonError
from gnomon.sdk.models import Schedule

from .web import Ctx, error_text, page, render

__all__ = ["routes", "rule_text"]


def rule_text(s: Schedule) -> str:
    """The schedule's rule as written: ``cron 0 9 * * *``, ``rrule FREQ=...`` or ``every 0:05:00``."""
    if s.cron:
        return f"cron {s.cron}"
    if s.rrule:
        return f"rrule {s.rrule}"
    return f"every {s.interval}" if s.interval is not None else "-"


def _instant(text: str, field: str) -> datetime:
    """An ISO 8601 instant from a form (UTC when it has no offset)."""
    if not text:
        raise ValueError(f"{field} is required")
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@page
async def schedules(ctx: Ctx) -> Response:
    """``GET /schedules?namespace=&queue=&paused=&page_token=``: 50 schedules a page, by id."""
    queue, paused, token = ctx.field("queue"), ctx.field("paused"), ctx.field("page_token")
    flag = {"yes": True, "no": False}.get(paused)
    items, next_token = await ctx.api.list_schedules_page(flag, queue or None, 50, token)
    return render(
        ctx,
        "schedules.html",
        schedules=items,
        rules={s.name: rule_text(s) for s in items},
        next_token=next_token,
        queue=queue,
        paused=paused,
        token=token,
    )


@page
async def schedule(ctx: Ctx) -> Response:
    """``GET /schedules/{schedule}?from=&decision=&page_token=``: the schedule, its next 10 fire times
    (after ``from``, an ISO 8601 instant, default now) with their DST notes, and 50 decision records
    a page (newest nominal time first)."""
    s = await ctx.api.get_schedule(ctx.request.path_params["schedule"])
    decision, token, start = ctx.field("decision").upper(), ctx.field("page_token"), ctx.field("from")
    preview_error = ""
    try:
        fire_times = await ctx.api.preview_schedule(
            name=s.name, count=10, from_time=_instant(start, "from") if start else None
        )
    except GnomonError as e:  # e.g. a rule that never fires again: the rest of the page still helps
        fire_times, preview_error = [], error_text(e)
    occurrences, next_token = await ctx.api.list_schedule_occurrences_page(
        s.name, decision or None, 50, token
    )
    return render(
        ctx,
        "schedule.html",
        s=s,
        rule=rule_text(s),
        fire_times=fire_times,
        preview_error=preview_error,
        occurrences=occurrences,
        next_token=next_token,
        decision=decision,
        token=token,
        start=start,
    )


def _sid(ctx: Ctx) -> str:
    return str(ctx.request.path_params["schedule"])


@page
async def pause(ctx: Ctx) -> Response:
    """``POST /schedules/{schedule}/pause``."""
    await ctx.api.pause_schedule(_sid(ctx))
    return ctx.done(f"/schedules/{_sid(ctx)}", "paused")


@page
async def resume(ctx: Ctx) -> Response:
    """``POST /schedules/{schedule}/resume``."""
    await ctx.api.resume_schedule(_sid(ctx))
    return ctx.done(f"/schedules/{_sid(ctx)}", "resumed")


@page
async def trigger(ctx: Ctx) -> Response:
    """``POST /schedules/{schedule}/trigger``: one extra occurrence now (``overlap_policy`` optional)."""
    occ, job = await ctx.api.trigger_schedule(_sid(ctx), ctx.field("overlap_policy") or None)
    made = f", job {job.id}" if job is not None else ""
    return ctx.done(f"/schedules/{_sid(ctx)}", f"triggered: {occ.decision}{made}")


@page
async def backfill(ctx: Ctx) -> Response:
    """``POST /schedules/{schedule}/backfill``: the nominal times in ``[start, end)`` again."""
    start, end = _instant(ctx.field("start"), "start"), _instant(ctx.field("end"), "end")
    occs = await ctx.api.backfill_schedule(_sid(ctx), start, end, ctx.field("overlap_policy") or None)
    counts: dict[str, int] = {}
    for o in occs:
        counts[o.decision] = counts.get(o.decision, 0) + 1
    summary = ", ".join(f"{n} {d}" for d, n in sorted(counts.items())) or "no nominal time in range"
    return ctx.done(f"/schedules/{_sid(ctx)}", f"backfill: {summary}")


routes = [
    Route("/schedules", schedules),
    Route("/schedules/{schedule}", schedule),
    Route("/schedules/{schedule}/pause", pause, methods=["POST"]),
    Route("/schedules/{schedule}/resume", resume, methods=["POST"]),
    Route("/schedules/{schedule}/trigger", trigger, methods=["POST"]),
    Route("/schedules/{schedule}/backfill", backfill, methods=["POST"]),
]
