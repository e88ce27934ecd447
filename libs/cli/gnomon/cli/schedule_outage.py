"""``gnomon schedule simulate-outage``: what the planner would do with one schedule, or every schedule
of a namespace, if it were down from ``--from`` to ``--to`` (registered on
:data:`gnomon.cli.schedules.app`; nothing is written)."""

from __future__ import annotations

import json
from typing import Any

import typer

from gnomon.cli.common import API, NS, run
from gnomon.cli.render import occurrence_dict, table
from gnomon.cli.schedule_args import instant
from gnomon.sdk import Client, OutagePrediction
from gnomon.sdk.convert import rfc3339

__all__ = ["simulate_outage", "prediction_dict"]


def prediction_dict(p: OutagePrediction) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.OutagePrediction` as a JSON-ready dict (instants RFC 3339 UTC)."""
    r = rfc3339
    return {
        "schedule": p.schedule,
        "misfire_policy": p.misfire_policy,
        "overlap_policy": p.overlap_policy,
        "paused": p.paused,
        "missed_count": p.missed_count,
        "missed_first_time": r(p.missed_first_time),
        "missed_last_time": r(p.missed_last_time),
        "run_count": p.run_count,
        "runs": [
            {k: v for k, v in occurrence_dict(o).items() if k not in ("name", "job", "source")}
            for o in p.runs
        ],
        "skipped": [
            {
                "decision": s.decision,
                "count": s.count,
                "first_nominal_time": r(s.first_nominal_time),
                "last_nominal_time": r(s.last_nominal_time),
                "note": s.note,
            }
            for s in p.skipped
        ],
        "skipped_count": p.skipped_count,
        "catchup_finish_time": r(p.catchup_finish_time),
        "assumptions": list(p.assumptions),
    }


def _print(d: dict[str, Any]) -> None:
    typer.echo(f"{d['schedule']}  (misfire {d['misfire_policy']}, overlap {d['overlap_policy']})")
    if d["paused"]:
        typer.echo("  paused: nothing is planned")
        return
    if not d["missed_count"]:
        typer.echo("  no nominal time falls in the outage")
        return
    typer.echo(
        f"  missed: {d['missed_count']} nominal times {d['missed_first_time']} .. {d['missed_last_time']}"
    )
    rows: list[tuple[str, ...]] = [("  DECISION", "COUNT", "NOMINAL (UTC)", "RELEASED AT", "NOTE")]
    for o in d["runs"]:
        span = o["nominal_time"]
        if o.get("missed_count") and o["missed_first_time"] != o["missed_last_time"]:
            span = f"{o['missed_first_time']} .. {o['missed_last_time']}"
        rows.append(
            (
                "  " + o["decision"],
                str(o.get("missed_count") or 1),
                span,
                o["schedule_time"] or "-",
                o["note"] or "-",
            )
        )
    if d["run_count"] > len(d["runs"]):
        rows.append(("  ...", str(d["run_count"] - len(d["runs"])), "more runs not listed", "-", "-"))
    for s in d["skipped"]:
        first, last = s["first_nominal_time"], s["last_nominal_time"]
        rows.append(
            (
                "  " + s["decision"],
                str(s["count"]),
                first if first == last else f"{first} .. {last}",
                "-",
                s["note"],
            )
        )
    listed = sum(s["count"] for s in d["skipped"])
    if d["skipped_count"] > listed:
        rows.append(("  ...", str(d["skipped_count"] - listed), "more skipped times not listed", "-", "-"))
    table(rows)
    finish = d["catchup_finish_time"]
    typer.echo(f"  runs: {d['run_count']}; catch-up finishes {finish}" if finish else "  runs: none")
    for a in d["assumptions"]:
        typer.echo(f"  assumes: {a}")


def simulate_outage(
    name: str | None = typer.Argument(
        None, help="namespaces/{ns}/schedules/{id} or just the id; omitted: every schedule of --namespace."
    ),
    from_: str = typer.Option(..., "--from", help="RFC 3339: the planner's last step before the outage."),
    to: str = typer.Option(..., "--to", help="RFC 3339: its first step after (at most 366 days later)."),
    assume_active: int = typer.Option(
        0, "--assume-active", help="Earlier occurrences assumed still queued or running at --to (0-1000)."
    ),
    max_runs: int = typer.Option(
        100, "--max-runs", help="Runs (and ranges of skipped times) listed per schedule (1-1000)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON array, one object per schedule."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Predict what happens if the planner is down from --from to --to (nothing is written).

    Per schedule: the nominal times missed, then each run (fired, late, coalesced with its range,
    buffered) with the instant the catch-up budget releases it, each range of skipped times with
    the reason, when the catch-up finishes, and the assumptions made.
    """
    t0, t1 = instant(from_, "--from"), instant(to, "--to")
    assert t0 is not None and t1 is not None  # both options are required

    def fetch(c: Client) -> list[OutagePrediction]:
        out: list[OutagePrediction] = []
        token = ""
        while True:
            preds, token = c.simulate_outage(
                t0, t1, name, assume_active=assume_active, page_token=token, max_runs=max_runs
            )
            out += preds
            if not token:
                return out

    items = [prediction_dict(p) for p in run(api, namespace, fetch)]
    if json_out:
        typer.echo(json.dumps(items, indent=2))
        return
    if not items:
        typer.echo("no schedules")
    for d in items:
        _print(d)
