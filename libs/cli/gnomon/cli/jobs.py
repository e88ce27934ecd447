"""``gnomon job create|get|list|cancel|reschedule``: one-time jobs through the public API."""

from __future__ import annotations

import json

import typer

from gnomon.cli.common import API, NS, print_pages, run
from gnomon.cli.durations import parse_duration, parse_instant
from gnomon.cli.render import attempt_dict, failure_class_text, fields, job_dict, table
from gnomon.sdk import Client, Job

app = typer.Typer(help="Create, read, list, cancel and reschedule one-time jobs.", no_args_is_help=True)


@app.command()
def create(
    queue: str = typer.Option(..., "--queue", "-q", help="Queue name."),
    payload: str = typer.Option("", "--payload", "-p", help="Payload text (e.g. JSON), sent as UTF-8 bytes."),
    in_: str | None = typer.Option(None, "--in", help="Run after this delay: 2s, 500ms, 1h30m."),
    at: str | None = typer.Option(None, "--at", help="Run at this RFC 3339 instant."),
    deadline: str | None = typer.Option(
        None, "--deadline", help="RFC 3339 instant; expire if not dispatched by then."
    ),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="1-100; default 3."),
    request_id: str | None = typer.Option(None, "--request-id", help="UUID for an idempotent create."),
    idempotent: bool = typer.Option(
        False,
        "--idempotent",
        help="The effect is idempotent: retry even when an attempt's outcome is "
        "unknown (lease lost while running).",
    ),
    lease_duration: str | None = typer.Option(
        None, "--lease-duration", help="Lease per attempt, 1s-1h (default 30s)."
    ),
    retry_initial: str | None = typer.Option(
        None, "--retry-initial", help="Backoff before the first retry (default 1s)."
    ),
    retry_max: str | None = typer.Option(None, "--retry-max", help="Backoff cap, at most 1d (default 300s)."),
    retry_max_age: str | None = typer.Option(
        None, "--retry-max-age", help="No retry later than this after the first dispatch."
    ),
    non_retryable: list[str] | None = typer.Option(
        None, "--non-retryable", help="Error type never retried, e.g. ValueError (repeatable)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the whole job as JSON."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Create a one-time job; prints its resource name."""
    try:
        delay = parse_duration(in_) if in_ is not None else None
        when = parse_instant(at) if at is not None else None
        dl = parse_instant(deadline) if deadline is not None else None
        lease = parse_duration(lease_duration) if lease_duration is not None else None
        policy = {
            k: v
            for k, v in (
                ("initial_backoff", parse_duration(retry_initial) if retry_initial is not None else None),
                ("max_backoff", parse_duration(retry_max) if retry_max is not None else None),
                ("max_age", parse_duration(retry_max_age) if retry_max_age is not None else None),
                ("non_retryable_errors", list(non_retryable) if non_retryable else None),
            )
            if v is not None
        }
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    job = run(
        api,
        namespace,
        lambda c: c.create_job(
            queue,
            payload.encode(),
            schedule_time=when,
            delay=delay,
            deadline=dl,
            max_attempts=max_attempts,
            request_id=request_id,
            idempotent=idempotent,
            lease_duration=lease,
            retry_policy=policy or None,
        ),
        reason=False,
    )
    typer.echo(json.dumps(job_dict(job), indent=2) if json_out else job.name)


@app.command()
def get(
    name: str = typer.Argument(..., help="namespaces/{ns}/jobs/{id}, or just the id."),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show one job."""
    d = job_dict(run(api, namespace, lambda c: c.get_job(name), reason=False))
    if json_out:
        typer.echo(json.dumps(d, indent=2))
        return
    keys = "name state queue schedule_time dispatch_time start_time finish_time attempt max_attempts version"
    fields([(k, d[k]) for k in (*keys.split(), "last_error")], 14)


@app.command("list")
def list_(
    state: str | None = typer.Option(None, "--state", help="SCHEDULED, QUEUED, RUNNING, SUCCEEDED, ..."),
    queue: str | None = typer.Option(None, "--queue", "-q"),
    page_size: int = typer.Option(50, "--page-size"),
    page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
    all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one job per line."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """List jobs, newest first, a page at a time (prints the next page token to stderr)."""

    def show(job: Job) -> None:
        d = job_dict(job)
        text = f"{d['name']}  {d['state']:<9}  {d['queue']:<12}  {d['schedule_time']}"
        typer.echo(json.dumps(d) if json_out else text)

    def listing(c: Client) -> None:
        def fetch(token: str) -> tuple[list[Job], str]:
            return c.list_jobs_page(state.upper() if state else None, queue, page_size, token)

        print_pages(fetch, page_token, all_pages, show)

    run(api, namespace, listing, reason=False)


_OUTCOME_TEXT = {"CANCELLED": "cancelled", "CANCEL_REQUESTED": "cancel requested"}


@app.command()
def cancel(
    name: str = typer.Argument(..., help="namespaces/{ns}/jobs/{id}, or just the id."),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="Cancel only if the job is at this version."
    ),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Cancel a job; prints the outcome.

    "cancelled": it was not running and never will; "cancel requested": it is running, the worker
    is told, and it ends CANCELLED (or SUCCEEDED if the handler still succeeds); "already finished:
    STATE": nothing changed.
    """
    outcome, job = run(
        api, namespace, lambda c: c.cancel_job(name, expected_version=expected_version), reason=False
    )
    typer.echo(_OUTCOME_TEXT.get(outcome) or f"already finished: {job.state}")


@app.command()
def reschedule(
    name: str = typer.Argument(..., help="namespaces/{ns}/jobs/{id}, or just the id."),
    at: str | None = typer.Option(None, "--at", help="New RFC 3339 instant."),
    in_: str | None = typer.Option(None, "--in", help="New time = now + this delay: 2s, 500ms, 1h30m."),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="Reschedule only if the job is at this version."
    ),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Move a job not yet dispatched (SCHEDULED) to another time; prints its new schedule_time."""
    if (at is None) == (in_ is None):
        typer.echo("error: give exactly one of --at and --in", err=True)
        raise typer.Exit(2)
    try:
        delay = parse_duration(in_) if in_ is not None else None
        when = parse_instant(at) if at is not None else None
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    job = run(
        api,
        namespace,
        lambda c: c.reschedule_job(name, schedule_time=when, delay=delay, expected_version=expected_version),
        reason=False,
    )
    typer.echo(job_dict(job)["schedule_time"])


@app.command()
def history(
    name: str = typer.Argument(..., help="namespaces/{ns}/jobs/{id}, or just the id."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one attempt per line (every field)."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show a job's attempts, oldest first: number, worker, fencing token, state, failure class, error.

    A LOST attempt's lease expired while it ran (worker killed, paused or cut off): its outcome is
    unknown, and the job was retried only if it is idempotent.
    """
    attempts = run(api, namespace, lambda c: c.list_job_attempts(name), reason=False)
    if json_out:
        for a in attempts:
            typer.echo(json.dumps(attempt_dict(a)))
        return
    if not attempts:
        typer.echo("no attempts yet")
        return
    rows = [("#", "STATE", "WORKER", "TOKEN", "CLASS", "ERROR")]
    for a in attempts:
        err = " ".join(a.error.split())
        rows.append(
            (
                str(a.attempt),
                a.state,
                a.worker_id or "-",
                str(a.fencing_token),
                failure_class_text(a.failure_class) or "-",
                (err[:77] + "...") if len(err) > 80 else (err or "-"),
            )
        )
    table(rows)
