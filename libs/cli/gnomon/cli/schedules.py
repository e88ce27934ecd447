"""``gnomon schedule create|get|list|update|delete|pause|resume|trigger|backfill|history|preview|
simulate-outage``: recurring schedules through the public API (``gnomon.v1.ScheduleService``). The
commands that run or show occurrences (trigger, backfill, history, preview) are in
:mod:`gnomon.cli.schedule_runs`; ``simulate-outage`` is in :mod:`gnomon.cli.schedule_outage`."""

from __future__ import annotations

import json

import typer

from gnomon.cli import schedule_outage, schedule_runs
from gnomon.cli.common import API, JSON, NS, print_pages, run, usage
from gnomon.cli.render import fields, schedule_dict
from gnomon.cli.schedule_args import (
    CRON,
    END,
    EVERY,
    FOLD,
    FOLDS,
    GAP,
    GAPS,
    MISFIRES,
    OVERLAPS,
    RRULE,
    START,
    TZ,
    choice,
    duration,
    instant,
    rule,
)
from gnomon.sdk import Client, Schedule

app = typer.Typer(help="Create, inspect, preview and control recurring schedules.", no_args_is_help=True)


def _print_schedule(s: Schedule, json_out: bool) -> None:
    d = schedule_dict(s)
    if json_out:
        typer.echo(json.dumps(d, indent=2))
        return
    rule_text = d["cron"] or d["rrule"] or (f"every {d['interval']}" if d["interval"] else "-")
    fields(
        [
            ("name", d["name"]),
            ("rule", rule_text),
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
        ],
        16,
    )


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
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Create a recurring schedule; prints its resource name."""
    kwargs = dict(
        rule(cron, rrule, every),
        time_zone=tz,
        schedule_id=schedule_id,
        payload=payload.encode(),
        misfire_policy=choice(misfire, MISFIRES, "--misfire"),
        misfire_grace=duration(grace, "--grace"),
        catchup_window=duration(catchup_window, "--catchup-window"),
        max_catchup=max_catchup,
        overlap_policy=choice(overlap, OVERLAPS, "--overlap"),
        dst_gap=choice(dst_gap, GAPS, "--dst-gap"),
        dst_fold=choice(dst_fold, FOLDS, "--dst-fold"),
        jitter=duration(jitter, "--jitter"),
        start_time=instant(start, "--start"),
        end_time=instant(end, "--end"),
        paused=paused,
        idempotent=idempotent,
        max_attempts=max_attempts,
        request_id=request_id,
    )
    s = run(api, namespace, lambda c: c.create_schedule(queue, **kwargs))
    if json_out:
        _print_schedule(s, True)
    else:
        typer.echo(s.name)


@app.command()
def get(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    json_out: bool = JSON,
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show one schedule."""
    _print_schedule(run(api, namespace, lambda c: c.get_schedule(name)), json_out)


@app.command("list")
def list_(
    paused: bool | None = typer.Option(None, "--paused/--active", help="Only paused / only active ones."),
    queue: str | None = typer.Option(None, "--queue", "-q", help="Only schedules targeting this queue."),
    page_size: int = typer.Option(50, "--page-size"),
    page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
    all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one schedule per line."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """List schedules by id, a page at a time (prints the next page token to stderr)."""

    def show(s: Schedule) -> None:
        d = schedule_dict(s)
        rule_text = d["cron"] or d["rrule"] or f"every {d['interval']}"
        typer.echo(
            json.dumps(d)
            if json_out
            else f"{d['name']}  {'paused' if d['paused'] else 'active':<6}  {d['job_template']['queue']:<12}  "
            f"{d['time_zone']:<20}  {rule_text}  next={d['next_fire_time'] or '-'}"
        )

    def listing(c: Client) -> None:
        def fetch(token: str) -> tuple[list[Schedule], str]:
            return c.list_schedules_page(paused, queue, page_size, token)

        print_pages(fetch, page_token, all_pages, show)

    run(api, namespace, listing)


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
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Change the given fields of a schedule (only those); prints the new version."""
    fields = dict(rule(cron, rrule, every, required=False))
    for key, value in (
        ("time_zone", tz),
        ("queue", queue),
        ("payload", payload.encode() if payload is not None else None),
        ("misfire_policy", choice(misfire, MISFIRES, "--misfire")),
        ("misfire_grace", duration(grace, "--grace")),
        ("catchup_window", duration(catchup_window, "--catchup-window")),
        ("max_catchup", max_catchup),
        ("overlap_policy", choice(overlap, OVERLAPS, "--overlap")),
        ("dst_gap", choice(dst_gap, GAPS, "--dst-gap")),
        ("dst_fold", choice(dst_fold, FOLDS, "--dst-fold")),
        ("jitter", duration(jitter, "--jitter")),
        ("start_time", instant(start, "--start")),
        ("end_time", instant(end, "--end")),
        ("max_attempts", max_attempts),
    ):
        if value is not None:
            fields[key] = value
    if not fields:
        usage("nothing to update: give at least one field option")
    s = run(api, namespace, lambda c: c.update_schedule(name, etag=etag, **fields))
    if json_out:
        _print_schedule(s, True)
    else:
        typer.echo(f"{s.name} version {s.version}")


@app.command()
def delete(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    etag: str | None = typer.Option(None, "--etag", help="Delete only if the schedule is at this etag."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Delete a schedule and its not-yet-dispatched future occurrence jobs."""
    n = run(api, namespace, lambda c: c.delete_schedule(name, etag=etag))
    typer.echo(f"deleted ({n} future job{'s' if n != 1 else ''} withdrawn)")


@app.command()
def pause(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Pause a schedule (nothing more is planned)."""
    s = run(api, namespace, lambda c: c.pause_schedule(name))
    typer.echo(f"{s.name} paused")


@app.command()
def resume(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Resume a schedule (times missed while paused are recorded SKIPPED_PAUSED, never caught up)."""
    s = run(api, namespace, lambda c: c.resume_schedule(name))
    typer.echo(f"{s.name} resumed")


for _command in (schedule_runs.trigger, schedule_runs.backfill, schedule_runs.history, schedule_runs.preview):
    app.command()(_command)
app.command("simulate-outage")(schedule_outage.simulate_outage)
