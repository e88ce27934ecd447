"""``gnomon dlq list|replay|audit``: the dead-letter queue through the public API.

Replays are recorded in the audit log under the principal you authenticate as (your API key's
principal, see docs/security.md) and your address.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import typer

from gnomon.cli.common import API, NS, fail, print_pages, run
from gnomon.cli.durations import parse_instant
from gnomon.cli.render import audit_entry_dict, dead_letter_dict, failure_class_text, job_dict
from gnomon.sdk import AsyncClient, AuditEntry, Client, DeadLetter, FailureClass, GnomonError

app = typer.Typer(
    help="List and replay dead letters (jobs in state DEAD); read the audit log.", no_args_is_help=True
)

QUEUE = typer.Option(None, "--queue", "-q", help="Only this queue.")
CLASS = typer.Option(
    None, "--class", help="Only this failure class: TRANSIENT, THROTTLED, PERMANENT, AMBIGUOUS."
)
ERROR = typer.Option(
    None, "--error", help="Only dead letters whose last error contains this text (any case)."
)
SINCE = typer.Option(None, "--since", help="Only those finished at or after this RFC 3339 instant.")
UNTIL = typer.Option(None, "--until", help="Only those finished before this RFC 3339 instant.")

#: How many replayed jobs the progress display reads at once.
POLL_CONCURRENCY = 32


def _filters(
    queue: str | None, klass: str | None, error: str | None, since: str | None, until: str | None
) -> dict[str, Any]:
    try:
        return dict(
            queue=queue,
            failure_class=FailureClass.coerce(klass) if klass else None,
            error_contains=error,
            start_time=parse_instant(since) if since else None,
            end_time=parse_instant(until) if until else None,
        )
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


@app.command("list")
def list_(
    queue: str | None = QUEUE,
    klass: str | None = CLASS,
    error: str | None = ERROR,
    since: str | None = SINCE,
    until: str | None = UNTIL,
    include_replayed: bool = typer.Option(False, "--include-replayed", help="Also those replayed already."),
    page_size: int = typer.Option(50, "--page-size"),
    page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
    all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
    json_out: bool = typer.Option(
        False, "--json", help="JSON lines, one dead letter (with attempts) per line."
    ),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """List dead letters, most recently finished first (prints the next page token to stderr)."""
    filters = _filters(queue, klass, error, since, until)

    def show(d: DeadLetter) -> None:
        if json_out:
            typer.echo(json.dumps(dead_letter_dict(d)))
            return
        j = job_dict(d.job)
        err = " ".join(d.job.last_error.split())
        line = (
            f"{j['name']}  {j['queue']:<12}  {failure_class_text(d.job.failure_class) or '-':<10}  {j['finish_time']}  "
            f"attempts={d.job.attempt}  {err[:80]}"
        )
        if d.replayed_by:
            line += f"  -> replayed by {d.replayed_by}"
        typer.echo(line)

    def listing(c: Client) -> None:
        def fetch(token: str) -> tuple[list[DeadLetter], str]:
            return c.list_dead_letters_page(
                include_replayed=include_replayed, page_size=page_size, page_token=token, **filters
            )

        print_pages(fetch, page_token, all_pages, show)

    run(api, namespace, listing, reason=False)


@app.command()
def replay(
    queue: str | None = QUEUE,
    klass: str | None = CLASS,
    error: str | None = ERROR,
    since: str | None = SINCE,
    until: str | None = UNTIL,
    max_rate: float = typer.Option(
        ..., "--max-rate", help="Release at most this many jobs per second (0.001-1000)."
    ),
    max_jobs: int = typer.Option(..., "--max-jobs", help="Replay at most this many dead letters (1-100000)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count (and audit); replay nothing."),
    reason: str = typer.Option(..., "--reason", help="Why, for the audit log (1-1000 characters)."),
    request_id: str | None = typer.Option(
        None, "--request-id", help="UUID making the replay idempotent (default: a new one, printed)."
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the replayed jobs until they finish."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds the replay call may take."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Replay dead letters as new jobs, rate-limited, then follow them (Ctrl-C stops following).

    Prints "matched N, replayed K", then once a second "replayed k/n dispatched, m finished" until
    every replayed job is finished. The new jobs are already scheduled (1/max-rate seconds apart):
    stopping the display does not stop the replay. Repeating the command with the same --request-id
    replays nothing more (and finishes a replay that was interrupted).
    """
    filters = _filters(queue, klass, error, since, until)
    with Client(api=api, namespace=namespace) as c:
        try:
            r = c.replay_dead_letters(
                max_rate=max_rate,
                max_jobs=max_jobs,
                reason=reason,
                dry_run=dry_run,
                request_id=request_id,
                timeout=timeout,
                **filters,
            )
        except GnomonError as e:
            fail(e)
    verb = "would replay" if r.dry_run else "replayed"
    shown = min(r.matched, max_jobs) if r.dry_run else r.replayed
    typer.echo(f"matched {r.matched}, {verb} {shown} (request_id {r.request_id})")
    if r.dry_run or not r.job_names or not wait:
        return
    if r.replayed > len(r.job_names):
        typer.echo(f"following the first {len(r.job_names)} of {r.replayed} replayed jobs", err=True)
    try:
        asyncio.run(_follow(api, namespace, r.job_names))
    except KeyboardInterrupt:
        typer.echo("stopped following; the replayed jobs stay scheduled", err=True)
    except GnomonError as e:
        typer.echo("cannot follow the replayed jobs (they stay scheduled):", err=True)
        fail(e)


async def _follow(
    api: str | None,
    namespace: str | None,
    names: list[str],
    interval_s: float = 1.0,
) -> None:
    """Polls the jobs ``names`` (GetJob, at most :data:`POLL_CONCURRENCY` at a time, finished ones
    no more) and prints a progress line every ``interval_s`` until all are finished."""
    dispatched: set[str] = set()
    finished: set[str] = set()
    sem = asyncio.Semaphore(POLL_CONCURRENCY)
    async with AsyncClient(api=api, namespace=namespace) as c:

        async def look(name: str) -> None:
            async with sem:
                try:
                    job = await c.get_job(name)
                except GnomonError as e:
                    code = getattr(e.code, "name", "")
                    if code == "NOT_FOUND":  # pruned by retention: long finished
                        dispatched.add(name)
                        finished.add(name)
                    elif code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):  # transient: try next round
                        raise
                    return
            if job.dispatch_time is not None or job.state != "SCHEDULED":
                dispatched.add(name)
            if job.terminal:
                finished.add(name)

        while True:
            started = time.monotonic()
            await asyncio.gather(*(look(n) for n in names if n not in finished))
            typer.echo(f"replayed {len(dispatched)}/{len(names)} dispatched, {len(finished)} finished")
            if len(finished) == len(names):
                return
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


@app.command()
def audit(
    page_size: int = typer.Option(50, "--page-size"),
    page_token: str = typer.Option("", "--page-token", help="Continue from a previous page."),
    all_pages: bool = typer.Option(False, "--all", help="Follow page tokens to the end."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, one entry per line."),
    api: str | None = API,
    namespace: str | None = NS,
) -> None:
    """Show the audit log (every mutating call, and replays with their counts), newest first; an entry
    of refused calls the server coalesced shows how many (``xN``)."""

    def show(entry: AuditEntry) -> None:
        d = audit_entry_dict(entry)
        if json_out:
            typer.echo(json.dumps(d))
            return
        det = entry.details
        if not entry.action.startswith("dead_letters.replay"):
            typer.echo(
                f"{d['create_time']}  {entry.action:<28}  {entry.actor}  {entry.outcome or 'OK'}  "
                f"x{entry.count}  resource={entry.resource}  peer={entry.peer}"
                + (f"  reason={entry.reason!r}" if entry.reason else "")
            )
            return
        counts = f"matched={det.get('matched_count')} replay={det.get('replay_count')}"
        typer.echo(
            f"{d['create_time']}  {entry.action:<28}  {entry.actor}  {counts}  "
            f"filter={json.dumps({k: v for k, v in (det.get('filter') or {}).items() if v})}  "
            f"reason={entry.reason!r}  request_id={entry.request_id}"
        )

    def listing(c: Client) -> None:
        print_pages(lambda token: c.list_audit_entries_page(page_size, token), page_token, all_pages, show)

    run(api, namespace, listing, reason=False)
