"""Dead letters: the list (filter by queue, failure class, error text, replayed or not), a replay
form (dry run or for real), the progress of a replay started here, and the namespace's audit trail
(``DeadLetterService``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from starlette.responses import Response
from starlette.routing import Route

from gnomon.sdk.models import TERMINAL_STATES

from .web import Ctx, page, render

__all__ = ["routes"]

CLASSES = ("TRANSIENT", "THROTTLED", "PERMANENT", "AMBIGUOUS")
#: Replayed jobs whose state a progress page reads (the first ones, in schedule order).
_PROGRESS_JOBS = 200
#: Replays a session remembers (the newest).
_KEPT_REPLAYS = 20


def _filters(ctx: Ctx) -> dict[str, Any]:
    return {
        "queue": ctx.field("queue") or None,
        "failure_class": ctx.field("failure_class").upper() or None,
        "error_contains": ctx.field("error_contains") or None,
    }


@page
async def dead_letters(ctx: Ctx) -> Response:
    """``GET /dead-letters?namespace=&queue=&failure_class=&error_contains=&include_replayed=&page_token=``:
    50 dead letters a page (most recently finished first) and the 20 newest audit entries."""
    filters = _filters(ctx)
    include = ctx.field("include_replayed") == "on"
    token = ctx.field("page_token")
    items, next_token = await ctx.api.list_dead_letters_page(
        **filters, include_replayed=include, page_size=50, page_token=token
    )
    audit, _ = await ctx.api.list_audit_entries_page(page_size=20)
    return render(
        ctx,
        "dead_letters.html",
        items=items,
        next_token=next_token,
        token=token,
        f={k: v or "" for k, v in filters.items()},
        include_replayed=include,
        classes=CLASSES,
        audit=audit,
    )


@page
async def replay(ctx: Ctx) -> Response:
    """``POST /dead-letters/replay``: the filter fields plus ``max_rate``, ``max_jobs``, ``reason``
    and ``mode`` (``dry_run`` or ``replay``); then the replay's page."""
    filters = _filters(ctx)
    dry = ctx.field("mode") != "replay"
    result = await ctx.api.replay_dead_letters(
        **filters,
        max_rate=float(ctx.field("max_rate") or "10"),
        max_jobs=int(ctx.field("max_jobs") or "100"),
        reason=ctx.field("reason"),
        dry_run=dry,
        timeout=300,
    )
    ctx.session.replays[result.request_id] = {
        "result": result,
        "filters": filters,
        "namespace": ctx.namespace,
    }
    while len(ctx.session.replays) > _KEPT_REPLAYS:  # the oldest first (insertion order)
        del ctx.session.replays[next(iter(ctx.session.replays))]
    what = (
        f"dry run: {result.matched} would be replayed"
        if dry
        else f"replayed {result.replayed} of {result.matched}"
    )
    return ctx.done(f"/dead-letters/replays/{result.request_id}", what)


@page
async def replay_progress(ctx: Ctx) -> Response:
    """``GET /dead-letters/replays/{request_id}``: a replay started in this session: what matched,
    what was replayed, and how far the replayed jobs got (their states, read now)."""
    rid = str(ctx.request.path_params["request_id"])
    entry = ctx.session.replays.get(rid)
    if entry is None:
        return render(ctx, "error.html", 404, error=f"NOT_FOUND: no replay {rid} in this session")
    result = entry["result"]
    api = ctx.api if entry["namespace"] == ctx.namespace else None
    states: Counter[str] = Counter()
    if api is not None:
        for name in result.job_names[:_PROGRESS_JOBS]:
            states[(await api.get_job(name)).state] += 1
    checked = sum(states.values())
    finished = sum(n for s, n in states.items() if s in TERMINAL_STATES)
    return render(
        ctx,
        "replay.html",
        rid=rid,
        r=result,
        filters=entry["filters"],
        states=sorted(states.items()),
        checked=checked,
        finished=finished,
        done=checked == 0 or finished == checked,
        percent=int(100 * finished / checked) if checked else 100,
    )


routes = [
    Route("/dead-letters", dead_letters),
    Route("/dead-letters/replay", replay, methods=["POST"]),
    Route("/dead-letters/replays/{request_id}", replay_progress),
]
