"""Queues: due backlog, oldest due age, breaker, retry budget and rate limit of each queue, and a
form to set the rate limit (``QueueService``).

The API has no "list queues" call; the queues shown are those named by the namespace's first 500
schedules and its 500 newest jobs, plus any typed into the form (``?queue=``)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from .web import Ctx, page, render

__all__ = ["routes"]

#: How many schedules and newest jobs are looked at for queue names (one page each).
_SCAN = 500
_MAX_QUEUES = 50


@page
async def queues(ctx: Ctx) -> Response:
    """``GET /queues?namespace=&queue=``: the health of every known queue (at most 50)."""
    names: dict[str, None] = {}
    typed = ctx.field("queue")
    if typed:
        names[typed] = None
    schedules, _ = await ctx.api.list_schedules_page(page_size=_SCAN)
    for s in schedules:
        names[s.job_template.queue] = None
    page_jobs, _ = await ctx.api.list_jobs_page(page_size=_SCAN)
    for j in page_jobs:
        names[j.queue] = None
    found = [await ctx.api.get_queue(n) for n in sorted(names)[:_MAX_QUEUES]]
    return render(ctx, "queues.html", queues=found, typed=typed, truncated=len(names) > _MAX_QUEUES)


@page
async def queue(ctx: Ctx) -> Response:
    """``GET /queues/{queue}``: one queue's health and its rate-limit form."""
    q = await ctx.api.get_queue(ctx.request.path_params["queue"])
    return render(ctx, "queue.html", q=q)


@page
async def rate_limit(ctx: Ctx) -> Response:
    """``POST /queues/{queue}/rate-limit``: ``rate`` per second (0 removes the limit), ``burst``."""
    name = str(ctx.request.path_params["queue"])
    rate = float(ctx.field("rate") or "0")
    burst = int(ctx.field("burst") or "0")
    q = await ctx.api.set_queue_rate_limit(name, rate, burst)
    text = (
        f"rate limit {q.rate_limit.rate:g}/s, burst {q.rate_limit.burst}" if q.rate_limit else "no rate limit"
    )
    return ctx.done(f"/queues/{name}", f"{q.queue}: {text}")


routes = [
    Route("/queues", queues),
    Route("/queues/{queue}", queue),
    Route("/queues/{queue}/rate-limit", rate_limit, methods=["POST"]),
]
