"""``gnomon dev --demo``: :func:`run` starts a demo worker and demo jobs and prints what happens to
them; :func:`handle` is the demo worker's handler (prints the payload and sleeps a little)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from gnomon.sdk import JobContext

if TYPE_CHECKING:
    from gnomon.cli.suite import Suite


def handle(ctx: JobContext) -> None:
    """Prints the job's JSON payload with its idempotency key, then works for 0.2 s."""
    try:
        payload = ctx.json()
    except ValueError:
        payload = ctx.payload  # not JSON: show the raw bytes
    print(
        f"demo worker: running {ctx.job} attempt {ctx.attempt} payload={payload!r} "
        f"idempotency_key={ctx.idempotency_key}",
        flush=True,
    )
    time.sleep(0.2)


def run(suite: Suite, stop: threading.Event, on_change: Callable[[], None] | None = None) -> None:
    """Starts a demo worker and creates five demo jobs due 0-4 s from now; prints each transition."""
    from datetime import timedelta

    from gnomon.sdk import Client

    suite.start_worker(["demo"], "gnomon.cli.demo:handle", concurrency=4, extra=["--verbose"])
    typer.echo(f"demo worker started (log: {suite.procs[-1].log_path})")
    if on_change:
        on_change()
    with Client(api=suite.api_address) as c:
        names = []
        for i in range(5):
            j = c.create_job("demo", {"n": i, "greeting": f"hello #{i}"}, delay=timedelta(seconds=i))
            names.append(j.name)
            typer.echo(f"created    {j.name}  due {j.schedule_time.isoformat() if j.schedule_time else '-'}")
        seen: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while (
            len([s for s in seen.values() if s in ("SUCCEEDED", "DEAD", "FAILED")]) < len(names)
            and time.monotonic() < deadline
            and not stop.is_set()
        ):
            for n in names:
                j = c.get_job(n)
                if seen.get(n) != j.state:
                    first_seen_dispatched = seen.get(n) in (None, "SCHEDULED") and j.dispatch_time is not None
                    seen[n] = j.state
                    if first_seen_dispatched and j.dispatch_time and j.schedule_time:
                        lag = (j.dispatch_time - j.schedule_time).total_seconds() * 1000
                        typer.echo(f"dispatched {n}  attempt {j.attempt}  dispatch lag {lag:.1f} ms")
                    if j.state == "SUCCEEDED":
                        finished = j.finish_time.isoformat() if j.finish_time else "-"
                        typer.echo(f"finished   {n}  {j.state} at {finished}")
                    elif j.state not in ("SCHEDULED", "QUEUED", "RUNNING"):
                        typer.echo(f"{j.state.lower():<10} {n}  {j.last_error}")
            time.sleep(0.05)
    typer.echo("demo jobs done; the suite keeps running")
