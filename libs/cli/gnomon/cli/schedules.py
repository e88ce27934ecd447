"""``gnomon schedule create|get|list|update|delete|pause|resume|trigger|backfill|history|preview``:
recurring schedules through the public API (``gnomon.v1.ScheduleService``)."""

from __future__ import annotations

import json
import sys

import typer

from gnomon.cli.durations import parse_duration, parse_instant
from gnomon.cli.jobs import API, NS, fail

app = typer.Typer(help="Create, inspect, preview and control recurring schedules.", no_args_is_help=True)

CRON = typer.Option(None, "--cron", help="Cron rule: 5 fields (or 6 with seconds), @daily, Quartz L/W/#.")
RRULE = typer.Option(None, "--rrule", help="RFC 5545 rule, e.g. 'FREQ=WEEKLY;BYDAY=MO;BYHOUR=9'.")
EVERY = typer.Option(None, "--every", help="Fixed interval anchored at --start: 30s, 15m, 1h30m.")
TZ = typer.Option("UTC", "--tz", "--time-zone", help="IANA time zone the rule is evaluated in.")
START = typer.Option(None, "--start", help="RFC 3339: no occurrence before it (anchor of --every, DTSTART).")
END = typer.Option(None, "--end", help="RFC 3339: no occurrence after it.")
GAP = typer.Option(None, "--dst-gap", help="Spring-forward gap: shift_forward (default) or skip.")
FOLD = typer.Option(None, "--dst-fold", help="Fall-back fold: first (default), second or both.")
JSON = typer.Option(False, "--json", help="Print JSON.")

_GAPS = ("shift_forward", "skip")
_FOLDS = ("first", "second", "both")
_MISFIRES = ("run_latest", "skip", "coalesce", "run_all")
_OVERLAPS = ("allow", "skip", "buffer_one", "buffer_all", "cancel_other")
_DECISIONS = (
    "fired",
    "late",
    "coalesced",
    "buffered",
    "skipped_overlap",
    "skipped_misfire",
    "skipped_dst_gap",
    "skipped_paused",
    "deduplicated",
)


def _usage(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _server_fail(err) -> None:
    """:func:`gnomon.cli.jobs.fail` (exit 1), followed by the ``ErrorInfo`` reason (e.g.
    RULE_NEVER_FIRES, INVALID_TIME_ZONE) when the server sent one."""
    try:
        fail(err)
    finally:
        reason = getattr(err, "reason", None)
        if reason and reason != getattr(getattr(err, "code", None), "name", None):
            typer.echo(f"  reason: {reason}", err=True)


def _choice(value: str | None, allowed: tuple[str, ...], flag: str) -> str | None:
    if value is None:
        return None
    v = value.strip().lower().replace("-", "_")
    if v not in allowed:
        _usage(f"{flag} must be one of {', '.join(allowed)}, not {value!r}")
    return v.upper()


def _rule(cron: str | None, rrule: str | None, every: str | None, *, required: bool = True) -> dict:
    given = {k: v for k, v in (("cron", cron), ("rrule", rrule), ("every", every)) if v is not None}
    if len(given) > 1 or (required and not given):
        _usage("give exactly one of --cron, --rrule and --every")
    if "every" in given:
        given["every"] = _duration(given["every"], "--every")
    return given


def _duration(text: str | None, flag: str):
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as e:
        _usage(f"{flag}: {e}")


def _instant(text: str | None, flag: str):
    if text is None:
        return None
    try:
        return parse_instant(text)
    except ValueError as e:
        _usage(f"{flag}: {e}")


def _client(api: str, namespace: str):
    from gnomon.sdk import Client

    return Client(api=api, namespace=namespace)


def _run(api: str, namespace: str, fn):
    """Calls ``fn(client)``; a server error goes to :func:`_server_fail`, a local one exits 2."""
    from gnomon.sdk import GnomonError

    with _client(api, namespace) as c:
        try:
            return fn(c)
        except GnomonError as e:
            _server_fail(e)
        except (ValueError, TypeError) as e:
            _usage(str(e))


def _print_schedule(s, json_out: bool) -> None:
    from gnomon.sdk.client import schedule_dict

    d = schedule_dict(s)
    if json_out:
        typer.echo(json.dumps(d, indent=2))
        return
    rule = d["cron"] or d["rrule"] or (f"every {d['interval']}" if d["interval"] else "-")
    for k, v in (
        ("name", d["name"]),
        ("rule", rule),
        ("time_zone", d["time_zone"]),
        ("queue", d["job_template"]["queue"]),
        ("paused", d["paused"]),
        ("misfire", d["misfire_policy"]),
        ("overlap", d["overlap_policy"]),
        ("dst", f"gap {d['dst_gap']}, fold {d['dst_fold']}"),
        ("start_time", d["start_time"]),
        ("end_time", d["end_time"]),
        ("next_fire_time", d["next_fire_time"]),
        ("planned_through", d["planned_through_time"]),
        ("version", d["version"]),
        ("etag", d["etag"]),
    ):
        typer.echo(f"{k:16} {v if v is not None else '-'}")


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1])


@app.command()
def create(
    queue: str = typer.Option(..., "--queue", "-q", help="Queue of every occurrence job."),
    cron: str | None = CRON,
    rrule: str | None = RRULE,
    every: str | None = EVERY,
    tz: str = TZ,
    payload: str = typer.Option("", "--payload", "-p", help="Payload text (e.g. JSON), sent as UTF-8 bytes."),
    schedule_id: str = typer.Option(
        "",
        "--id",
        help="Schedule id: 1-63 lower-case letters, digits and '-', starting with a letter; default a UUID.",
    ),
    misfire: str | None = typer.Option(
        None, "--misfire", help="run_latest (default), skip, coalesce, run_all."
    ),
    grace: str | None = typer.Option(None, "--grace", help="Misfire grace, 0-1d (default 60s)."),
    catchup_window: str | None = typer.Option(
        None, "--catchup-window", help="Missed runs older than this are skipped (default 24h)."
    ),
    max_catchup: int | None = typer.Option(None, "--max-catchup", help="run_all: at most this many."),
    overlap: str | None = typer.Option(
        None, "--overlap", help="allow, skip (default), buffer_one, buffer_all, cancel_other."
    ),
    dst_gap: str | None = GAP,
    dst_fold: str | None = FOLD,
    jitter: str | None = typer.Option(None, "--jitter", help="Random delay in [0, jitter), at most 1h."),
    start: str | None = START,
    end: str | None = END,
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Per occurrence, 1-100."),
    paused: bool = typer.Option(False, "--paused", help="Create it paused."),
    idempotent: bool = typer.Option(False, "--idempotent", help="The occurrence jobs are idempotent."),
    request_id: str | None = typer.Option(None, "--request-id", help="UUID for an idempotent create."),
    json_out: bool = JSON,
    api: str = API,
    namespace: str = NS,
) -> None:
    """Create a recurring schedule; prints its resource name."""
    kwargs = dict(
        _rule(cron, rrule, every),
        time_zone=tz,
        schedule_id=schedule_id,
        payload=payload.encode(),
        misfire_policy=_choice(misfire, _MISFIRES, "--misfire"),
        misfire_grace=_duration(grace, "--grace"),
        catchup_window=_duration(catchup_window, "--catchup-window"),
        max_catchup=max_catchup,
        overlap_policy=_choice(overlap, _OVERLAPS, "--overlap"),
        dst_gap=_choice(dst_gap, _GAPS, "--dst-gap"),
        dst_fold=_choice(dst_fold, _FOLDS, "--dst-fold"),
        jitter=_duration(jitter, "--jitter"),
        start_time=_instant(start, "--start"),
        end_time=_instant(end, "--end"),
        paused=paused,
        idempotent=idempotent,
        max_attempts=max_attempts,
        request_id=request_id,
    )
    s = _run(api, namespace, lambda c: c.create_schedule(queue, **kwargs))
    if json_out:
        _print_schedule(s, True)
    else:
        typer.echo(s.name)


@app.command()
def get(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    json_out: bool = JSON,
    api: str = API,
    namespace: str = NS,
) -> None:
    """Show one schedule."""
    _print_schedule(_run(api, namespace, lambda c: c.get_schedule(name)), json_out)


@app.command("list")
def list_(
    paused: bool | None = typer.Option(None, "--paused/--active", help="Only paused / only active ones."),
    queue: str | None = typer.Option(None, "--queue", "-q", help="Only schedules targeting this queue."),
    page_size: int = typer.Option(50, "--page-size"),
    page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
    all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one schedule per line."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """List schedules by id, a page at a time (prints the next page token to stderr)."""
    from gnomon.sdk.client import schedule_dict

    token = page_token
    while True:
        items, token = _run(
            api, namespace, lambda c, t=token: c.list_schedules_page(paused, queue, page_size, t)
        )
        for s in items:
            d = schedule_dict(s)
            rule = d["cron"] or d["rrule"] or f"every {d['interval']}"
            typer.echo(
                json.dumps(d)
                if json_out
                else f"{d['name']}  {'paused' if d['paused'] else 'active':<6}  {d['job_template']['queue']:<12}  "
                f"{d['time_zone']:<20}  {rule}  next={d['next_fire_time'] or '-'}"
            )
        if not token or not all_pages:
            break
    if token:
        typer.echo(f"next page: --page-token {token}", err=True)
    sys.stdout.flush()


@app.command()
def update(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    cron: str | None = CRON,
    rrule: str | None = RRULE,
    every: str | None = EVERY,
    tz: str | None = typer.Option(None, "--tz", "--time-zone", help="New IANA time zone."),
    queue: str | None = typer.Option(None, "--queue", "-q", help="New queue of the occurrence jobs."),
    payload: str | None = typer.Option(None, "--payload", "-p", help="New payload text."),
    misfire: str | None = typer.Option(None, "--misfire", help="run_latest, skip, coalesce, run_all."),
    grace: str | None = typer.Option(None, "--grace", help="Misfire grace."),
    catchup_window: str | None = typer.Option(None, "--catchup-window", help="Catch-up window."),
    max_catchup: int | None = typer.Option(None, "--max-catchup", help="run_all limit."),
    overlap: str | None = typer.Option(
        None, "--overlap", help="allow, skip, buffer_one, buffer_all, cancel_other."
    ),
    dst_gap: str | None = GAP,
    dst_fold: str | None = FOLD,
    jitter: str | None = typer.Option(None, "--jitter", help="New jitter."),
    start: str | None = START,
    end: str | None = END,
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Per occurrence, 1-100."),
    etag: str | None = typer.Option(None, "--etag", help="Update only if the schedule is at this etag."),
    json_out: bool = JSON,
    api: str = API,
    namespace: str = NS,
) -> None:
    """Change the given fields of a schedule (only those); prints the new version."""
    fields = dict(_rule(cron, rrule, every, required=False))
    for key, value in (
        ("time_zone", tz),
        ("queue", queue),
        ("payload", payload.encode() if payload is not None else None),
        ("misfire_policy", _choice(misfire, _MISFIRES, "--misfire")),
        ("misfire_grace", _duration(grace, "--grace")),
        ("catchup_window", _duration(catchup_window, "--catchup-window")),
        ("max_catchup", max_catchup),
        ("overlap_policy", _choice(overlap, _OVERLAPS, "--overlap")),
        ("dst_gap", _choice(dst_gap, _GAPS, "--dst-gap")),
        ("dst_fold", _choice(dst_fold, _FOLDS, "--dst-fold")),
        ("jitter", _duration(jitter, "--jitter")),
        ("start_time", _instant(start, "--start")),
        ("end_time", _instant(end, "--end")),
        ("max_attempts", max_attempts),
    ):
        if value is not None:
            fields[key] = value
    if not fields:
        _usage("nothing to update: give at least one field option")
    s = _run(api, namespace, lambda c: c.update_schedule(name, etag=etag, **fields))
    if json_out:
        _print_schedule(s, True)
    else:
        typer.echo(f"{s.name} version {s.version}")


@app.command()
def delete(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    etag: str | None = typer.Option(None, "--etag", help="Delete only if the schedule is at this etag."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Delete a schedule and its not-yet-dispatched future occurrence jobs."""
    n = _run(api, namespace, lambda c: c.delete_schedule(name, etag=etag))
    typer.echo(f"deleted ({n} future job{'s' if n != 1 else ''} withdrawn)")


@app.command()
def pause(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Pause a schedule (nothing more is planned)."""
    s = _run(api, namespace, lambda c: c.pause_schedule(name))
    typer.echo(f"{s.name} paused")


@app.command()
def resume(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Resume a schedule (times missed while paused are recorded SKIPPED_PAUSED, never caught up)."""
    s = _run(api, namespace, lambda c: c.resume_schedule(name))
    typer.echo(f"{s.name} resumed")


@app.command()
def trigger(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    overlap: str | None = typer.Option(None, "--overlap", help="Overlap policy for this run."),
    json_out: bool = JSON,
    api: str = API,
    namespace: str = NS,
) -> None:
    """Run a schedule now as an extra occurrence; prints the decision and the job."""
    from gnomon.sdk.client import occurrence_dict

    policy = _choice(overlap, _OVERLAPS, "--overlap")
    occ, job = _run(api, namespace, lambda c: c.trigger_schedule(name, overlap_policy=policy))
    d = occurrence_dict(occ)
    if json_out:
        typer.echo(json.dumps(dict(d, job=job.name if job else d["job"]), indent=2))
    else:
        typer.echo(f"{d['decision']}  {job.name if job else d['job'] or '-'}")


@app.command()
def backfill(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    start: str = typer.Option(..., "--start", help="RFC 3339, inclusive."),
    end: str = typer.Option(..., "--end", help="RFC 3339, exclusive, not after now."),
    overlap: str | None = typer.Option(None, "--overlap", help="Overlap policy of the backfilled runs."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one record per line."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Plan the rule's nominal times in [start, end) again as BACKFILL occurrences."""
    from gnomon.sdk.client import occurrence_dict

    t0, t1, policy = (
        _instant(start, "--start"),
        _instant(end, "--end"),
        _choice(overlap, _OVERLAPS, "--overlap"),
    )
    occs = _run(api, namespace, lambda c: c.backfill_schedule(name, t0, t1, overlap_policy=policy))
    for o in occs:
        d = occurrence_dict(o)
        typer.echo(json.dumps(d) if json_out else f"{d['nominal_time']}  {d['decision']}  {d['note']}")
    if not json_out:
        typer.echo(f"{len(occs)} nominal time{'s' if len(occs) != 1 else ''}", err=True)


@app.command()
def history(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    decision: str | None = typer.Option(
        None, "--decision", help="Only this decision: " + ", ".join(_DECISIONS) + "."
    ),
    limit: int = typer.Option(100, "--limit", help="At most this many records (newest first)."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one record per line."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Show a schedule's occurrence records, newest first.

    Columns: nominal time (UTC), local wall time, decision, source (RULE, TRIGGER, BACKFILL), job, note.
    """
    from gnomon.sdk.client import occurrence_dict

    dec = _choice(decision, _DECISIONS, "--decision")

    def fetch(c):
        out = []
        for o in c.list_schedule_occurrences(name, decision=dec, page_size=min(max(limit, 1), 1000)):
            out.append(o)
            if len(out) >= limit:
                break
        return out

    occs = _run(api, namespace, fetch)
    if json_out:
        for o in occs:
            typer.echo(json.dumps(occurrence_dict(o)))
        return
    if not occs:
        typer.echo("no occurrences yet")
        return
    rows = [("NOMINAL", "LOCAL", "DECISION", "SOURCE", "JOB", "NOTE")]
    for o in occs:
        d = occurrence_dict(o)
        rows.append(
            (
                d["nominal_time"] or "-",
                d["local_time"] or "-",
                d["decision"],
                d["source"],
                (d["job"] or "-").rsplit("/", 1)[-1],
                d["note"] or "-",
            )
        )
    _table(rows)


@app.command()
def preview(
    name: str | None = typer.Argument(None, help="A saved schedule (else give a rule)."),
    cron: str | None = CRON,
    rrule: str | None = RRULE,
    every: str | None = EVERY,
    tz: str = TZ,
    start: str | None = START,
    end: str | None = END,
    dst_gap: str | None = GAP,
    dst_fold: str | None = FOLD,
    from_: str | None = typer.Option(
        None, "--from", help="RFC 3339: fire times strictly after it (default now)."
    ),
    count: int = typer.Option(
        10,
        "--count",
        "-c",
        help="How many fire times (1-1000); skipped DST-gap times are listed too but not counted.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON array."),
    api: str = API,
    namespace: str = NS,
) -> None:
    """Show the next fire times of a rule or a saved schedule (nothing is saved).

    Each line: UTC instant, local wall time with offset, DST note; skipped nominal times are listed too.
    """
    from gnomon.sdk.client import fire_time_dict

    if name is not None:
        if any(v is not None for v in (cron, rrule, every, start, end, dst_gap, dst_fold)):
            _usage("give either a saved schedule's name or a rule, not both")
        kwargs = {"name": name}
    else:
        kwargs = dict(
            _rule(cron, rrule, every),
            time_zone=tz,
            start=_instant(start, "--start"),
            end=_instant(end, "--end"),
            dst_gap=_choice(dst_gap, _GAPS, "--dst-gap"),
            dst_fold=_choice(dst_fold, _FOLDS, "--dst-fold"),
        )
    frm = _instant(from_, "--from")
    items = [
        fire_time_dict(f)
        for f in _run(api, namespace, lambda c: c.preview_schedule(from_time=frm, count=count, **kwargs))
    ]
    if json_out:
        typer.echo(json.dumps(items, indent=2))
        return
    rows = [("FIRE TIME (UTC)", "LOCAL TIME", "NOTE")]
    for d in items:
        note = ("skipped: " if d["skipped"] else "") + (d["note"] or "")
        rows.append((d["fire_time"], d["local_time"], note or "-"))
    _table(rows)
