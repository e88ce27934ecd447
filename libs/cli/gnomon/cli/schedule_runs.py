"""``gnomon schedule trigger|backfill|history|preview``: run a schedule now, plan a past range again,
show its occurrence records, preview fire times (registered on :data:`gnomon.cli.schedules.app`)."""

from __future__ import annotations

import json
from typing import Any

import typer

from gnomon.cli.common import API, JSON, NS, run, usage
from gnomon.cli.render import fire_time_dict, occurrence_dict, table
from gnomon.cli.schedule_args import (
    CRON,
    DECISIONS,
    END,
    EVERY,
    FOLD,
    FOLDS,
    GAP,
    GAPS,
    OVERLAPS,
    RRULE,
    START,
    TZ,
    choice,
    instant,
    rule,
)
from gnomon.sdk import Client, ScheduleOccurrence

__all__ = ["trigger", "backfill", "history", "preview"]


def trigger(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    overlap: str | None = typer.Option(None, "--overlap", help="Overlap policy for this run."),
    json_out: bool = JSON,
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Run a schedule now as an extra occurrence; prints the decision and the job."""
    policy = choice(overlap, OVERLAPS, "--overlap")
    occ, job = run(api, namespace, lambda c: c.trigger_schedule(name, overlap_policy=policy))
    d = occurrence_dict(occ)
    if json_out:
        typer.echo(json.dumps(dict(d, job=job.name if job else d["job"]), indent=2))
    else:
        typer.echo(f"{d['decision']}  {job.name if job else d['job'] or '-'}")


def backfill(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    start: str = typer.Option(..., "--start", help="RFC 3339, inclusive."),
    end: str = typer.Option(..., "--end", help="RFC 3339, exclusive, not after now."),
    overlap: str | None = typer.Option(None, "--overlap", help="Overlap policy of the backfilled runs."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one record per line."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Plan the rule's nominal times in [start, end) again as BACKFILL occurrences."""
    t0, t1, policy = (
        instant(start, "--start"),
        instant(end, "--end"),
        choice(overlap, OVERLAPS, "--overlap"),
    )
    assert t0 is not None and t1 is not None  # both options are required
    occs = run(api, namespace, lambda c: c.backfill_schedule(name, t0, t1, overlap_policy=policy))
    for o in occs:
        d = occurrence_dict(o)
        typer.echo(json.dumps(d) if json_out else f"{d['nominal_time']}  {d['decision']}  {d['note']}")
    if not json_out:
        typer.echo(f"{len(occs)} nominal time{'s' if len(occs) != 1 else ''}", err=True)


def history(
    name: str = typer.Argument(..., help="namespaces/{ns}/schedules/{id}, or just the id."),
    decision: str | None = typer.Option(
        None, "--decision", help="Only this decision: " + ", ".join(DECISIONS) + "."
    ),
    limit: int = typer.Option(100, "--limit", help="At most this many records (newest first)."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one record per line."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show a schedule's occurrence records, newest first.

    Columns: nominal time (UTC), local wall time, decision, source (RULE, TRIGGER, BACKFILL), job, note.
    """
    dec = choice(decision, DECISIONS, "--decision")

    def fetch(c: Client) -> list[ScheduleOccurrence]:
        out: list[ScheduleOccurrence] = []
        for o in c.list_schedule_occurrences(name, decision=dec, page_size=min(max(limit, 1), 1000)):
            out.append(o)
            if len(out) >= limit:
                break
        return out

    occs = run(api, namespace, fetch)
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
    table(rows)


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
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show the next fire times of a rule or a saved schedule (nothing is saved).

    Each line: UTC instant, local wall time with offset, DST note; skipped nominal times are listed too.
    """
    if name is not None:
        if any(v is not None for v in (cron, rrule, every, start, end, dst_gap, dst_fold)):
            usage("give either a saved schedule's name or a rule, not both")
        kwargs: dict[str, Any] = {"name": name}
    else:
        kwargs = dict(
            rule(cron, rrule, every),
            time_zone=tz,
            start=instant(start, "--start"),
            end=instant(end, "--end"),
            dst_gap=choice(dst_gap, GAPS, "--dst-gap"),
            dst_fold=choice(dst_fold, FOLDS, "--dst-fold"),
        )
    frm = instant(from_, "--from")
    items = [
        fire_time_dict(f)
        for f in run(api, namespace, lambda c: c.preview_schedule(from_time=frm, count=count, **kwargs))
    ]
    if json_out:
        typer.echo(json.dumps(items, indent=2))
        return
    rows = [("FIRE TIME (UTC)", "LOCAL TIME", "NOTE")]
    for d in items:
        note = ("skipped: " if d["skipped"] else "") + (d["note"] or "")
        rows.append((d["fire_time"], d["local_time"], note or "-"))
    table(rows)
