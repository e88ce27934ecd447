"""``gnomon queue get|limit``: a queue's circuit breaker, retry budget, due backlog and dispatch rate limit
through the public API."""

from __future__ import annotations

import json

import typer

from gnomon.cli.common import API, NS, run
from gnomon.cli.render import fields, queue_dict

app = typer.Typer(help="Inspect queues (circuit breaker, retry budget, backlog).", no_args_is_help=True)


@app.command()
def get(
    queue: str = typer.Argument(..., help="Queue name, or namespaces/{ns}/queues/{queue}."),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show one queue: breaker state, failure ratio, retry budget use, due jobs and the oldest one's wait."""
    d = queue_dict(run(api, namespace, lambda c: c.get_queue(queue), reason=False))
    if json_out:
        typer.echo(json.dumps(d, indent=2))
        return
    b = d["retry_budget"]
    due = f"{d['due_jobs']}{'+' if d['due_jobs_truncated'] else ''}"
    rows: list[tuple[str, object]] = [
        ("name", d["name"]),
        ("region", d["region"]),
        ("breaker", d["breaker_state"]),
        ("opened", d["opened_time"]),
        ("changed", d["breaker_update_time"]),
        ("failure ratio", f"{d['failure_ratio']:.2f} of {d['window_results']} results"),
        (
            "retry budget",
            f"{b['used']}/{b['allowed']} retries in {b['window']} ({b['first_attempts']} first attempts)",
        ),
        ("due jobs", due),
        ("oldest due", d["oldest_due_age"]),
        (
            "rate limit",
            None
            if d["rate_limit"] is None
            else "{rate:g}/s, burst {burst}, {available:.1f} available".format(**d["rate_limit"]),
        ),
    ]
    fields(rows, 14)


@app.command()
def limit(
    queue: str = typer.Argument(..., help="Queue name, or namespaces/{ns}/queues/{queue}."),
    rate: float = typer.Option(
        ..., "--rate", help="Dispatches per second shared by all dispatchers; 0 removes."
    ),
    burst: int = typer.Option(0, "--burst", help="Dispatches allowed at once (default: rate rounded up)."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Set (or with --rate 0 remove) a queue's dispatch rate limit; the backlog beyond it waits SCHEDULED."""
    q = run(api, namespace, lambda c: c.set_queue_rate_limit(queue, rate, burst), reason=False)
    typer.echo(
        "no rate limit" if q.rate_limit is None else f"{q.rate_limit.rate:g}/s, burst {q.rate_limit.burst}"
    )
