"""``gnomon dev``: the whole suite on one machine with embedded PostgreSQL and etcd."""
from __future__ import annotations

import os
import signal
import threading
import time

import typer


def dev(api: str = typer.Option("127.0.0.1:7070", "--api", help="host:port the public API listens on."),
        demo: bool = typer.Option(False, "--demo", help="Also run a demo worker and create a few demo jobs."),
        dispatchers: int = typer.Option(1, "--dispatchers", min=1, max=16, help="Dispatcher processes."),
        data_dir: str = typer.Option("", "--data-dir", help="Where servers keep data and logs, kept after exit "
                                     "(default: a temp dir, removed on exit)."),
        database_url: str = typer.Option("", "--database-url", help="Use this database instead of embedded PostgreSQL.")
        ) -> None:
    """Start PostgreSQL, etcd, api, planner, dispatcher(s) and reaper; stop everything on Ctrl-C."""
    from gnomon.cli.suite import Suite

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    typer.echo("starting embedded PostgreSQL and etcd ...")
    suite = Suite(api_listen=api, dispatchers=dispatchers, database_url=database_url or None,
                  base_dir=data_dir or None)
    try:
        suite.start()
        suite.write_status(os.path.join(suite.base_dir, "status.json"))
        for p in suite.procs:
            typer.echo(f"  {p.role:<10} pid {p.popen.pid:<7} {p.address:<22} metrics http://{p.metrics_address}/metrics")
        typer.echo(f"Gnomon API listening on {suite.api_address}  (logs: {suite.log_dir})")
        typer.echo(f"try:  gnomon job create --api {suite.api_address} --queue demo --in 2s --payload '{{\"x\": 1}}'")
        if demo:
            _demo(suite, stop)
        typer.echo("press Ctrl-C to stop")
        while not stop.is_set():
            for p in suite.procs:
                if p.popen.poll() is not None and p.role != "worker":
                    typer.echo(f"{p.role} (pid {p.popen.pid}) exited with {p.popen.returncode}; see {p.log_path}")
                    stop.set()
            stop.wait(0.5)
    finally:
        typer.echo("stopping ...")
        suite.stop()
        typer.echo("stopped")


def _demo(suite, stop: threading.Event) -> None:
    """Starts a demo worker and creates five demo jobs due 0-4 s from now; prints each transition."""
    from datetime import timedelta

    from gnomon.sdk import Client

    suite.start_worker(["demo"], "gnomon.cli.demo:handle", concurrency=4, extra=["--verbose"])
    typer.echo(f"demo worker started (log: {suite.procs[-1].log_path})")
    with Client(api=suite.api_address) as c:
        names = []
        for i in range(5):
            j = c.create_job("demo", {"n": i, "greeting": f"hello #{i}"}, delay=timedelta(seconds=i))
            names.append(j.name)
            typer.echo(f"created    {j.name}  due {j.schedule_time.isoformat()}")
        seen: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while len([s for s in seen.values() if s in ("SUCCEEDED", "DEAD", "FAILED")]) < len(names) \
                and time.monotonic() < deadline and not stop.is_set():
            for n in names:
                j = c.get_job(n)
                if seen.get(n) != j.state:
                    first_seen_dispatched = seen.get(n) in (None, "SCHEDULED") and j.dispatch_time is not None
                    seen[n] = j.state
                    if first_seen_dispatched:
                        lag = (j.dispatch_time - j.schedule_time).total_seconds() * 1000
                        typer.echo(f"dispatched {n}  attempt {j.attempt}  dispatch lag {lag:.1f} ms")
                    if j.state == "SUCCEEDED":
                        typer.echo(f"finished   {n}  {j.state} at {j.finish_time.isoformat()}")
                    elif j.state not in ("SCHEDULED", "QUEUED", "RUNNING"):
                        typer.echo(f"{j.state.lower():<10} {n}  {j.last_error}")
            time.sleep(0.05)
    typer.echo("demo jobs done; the suite keeps running")
