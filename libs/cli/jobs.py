"""``gnomon job create|get|list``: one-time jobs through the public API."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from gnomon.cli.durations import parse_duration, parse_instant

app = typer.Typer(help="Create, read and list one-time jobs.", no_args_is_help=True)
API = typer.Option("127.0.0.1:7070", "--api", envvar="GNOMON_API", help="host:port of the Gnomon API.")
NS = typer.Option("default", "--namespace", "-n", help="Namespace (tenant).")


def fail(err) -> None:
    """Prints a server error (status, reason, field violations) to stderr and exits 1."""
    code = getattr(getattr(err, "code", None), "name", "ERROR")
    violations = getattr(err, "field_violations", []) or []
    if violations:
        typer.echo(f"error: {code}: invalid request", err=True)
        for field, desc in violations:
            typer.echo(f"  {field}: {desc}", err=True)
    else:
        typer.echo(f"error: {code}: {getattr(err, 'message', str(err))}", err=True)
    raise typer.Exit(1)


@app.command()
def create(queue: str = typer.Option(..., "--queue", "-q", help="Queue name."),
           payload: str = typer.Option("", "--payload", "-p", help="Payload text (e.g. JSON), sent as UTF-8 bytes."),
           in_: Optional[str] = typer.Option(None, "--in", help="Run after this delay: 2s, 500ms, 1h30m."),
           at: Optional[str] = typer.Option(None, "--at", help="Run at this RFC 3339 instant."),
           deadline: Optional[str] = typer.Option(None, "--deadline", help="RFC 3339 instant; expire if not dispatched by then."),
           max_attempts: Optional[int] = typer.Option(None, "--max-attempts", help="1-100; default 3."),
           request_id: Optional[str] = typer.Option(None, "--request-id", help="UUID for an idempotent create."),
           json_out: bool = typer.Option(False, "--json", help="Print the whole job as JSON."),
           api: str = API, namespace: str = NS) -> None:
    """Create a one-time job; prints its resource name."""
    from gnomon.sdk import Client, GnomonError
    try:
        delay = parse_duration(in_) if in_ is not None else None
        when = parse_instant(at) if at is not None else None
        dl = parse_instant(deadline) if deadline is not None else None
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2)
    with Client(api=api, namespace=namespace) as c:
        try:
            job = c.create_job(queue, payload.encode(), schedule_time=when, delay=delay, deadline=dl,
                               max_attempts=max_attempts, request_id=request_id)
        except GnomonError as e:
            fail(e)
    typer.echo(json.dumps(job.to_json_dict(), indent=2) if json_out else job.name)


@app.command()
def get(name: str = typer.Argument(..., help="namespaces/{ns}/jobs/{id}, or just the id."),
        json_out: bool = typer.Option(False, "--json", help="Print as JSON."), api: str = API,
        namespace: str = NS) -> None:
    """Show one job."""
    from gnomon.sdk import Client, GnomonError
    with Client(api=api, namespace=namespace) as c:
        try:
            job = c.get_job(name)
        except GnomonError as e:
            fail(e)
    d = job.to_json_dict()
    if json_out:
        typer.echo(json.dumps(d, indent=2))
    else:
        for k in ("name", "state", "queue", "schedule_time", "dispatch_time", "start_time", "finish_time",
                  "attempt", "max_attempts", "version", "last_error"):
            typer.echo(f"{k:14} {d.get(k) if d.get(k) is not None else '-'}")


@app.command("list")
def list_(state: Optional[str] = typer.Option(None, "--state", help="SCHEDULED, QUEUED, RUNNING, SUCCEEDED, ..."),
          queue: Optional[str] = typer.Option(None, "--queue", "-q"),
          page_size: int = typer.Option(50, "--page-size"),
          page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
          all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
          json_out: bool = typer.Option(False, "--json", help="JSON lines, one job per line."),
          api: str = API, namespace: str = NS) -> None:
    """List jobs, newest first, a page at a time (prints the next page token to stderr)."""
    from gnomon.sdk import Client, GnomonError
    with Client(api=api, namespace=namespace) as c:
        token = page_token
        while True:
            try:
                jobs, token = c.list_jobs_page(state=state.upper() if state else None, queue=queue,
                                               page_size=page_size, page_token=token)
            except GnomonError as e:
                fail(e)
            for j in jobs:
                d = j.to_json_dict()
                typer.echo(json.dumps(d) if json_out else
                           f"{d['name']}  {d['state']:<9}  {d['queue']:<12}  {d['schedule_time']}")
            if not token or not all_pages:
                break
    if token:
        typer.echo(f"next page: --page-token {token}", err=True)
    sys.stdout.flush()
