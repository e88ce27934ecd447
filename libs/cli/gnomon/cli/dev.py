"""``gnomon dev``: the whole suite on one machine with embedded PostgreSQL and etcd;
``gnomon dev status``: what a running ``gnomon dev`` started."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import typer

app = typer.Typer(
    help="Run the whole suite on one machine (embedded PostgreSQL and etcd); "
    "`gnomon dev status` shows what a running one started.",
    invoke_without_command=True,
    no_args_is_help=False,
)

STATUS_FILE = "status.json"
_REGION = re.compile(r"[a-z][a-z0-9-]{0,31}")


def well_known_status_path() -> str:
    """Where a ``gnomon dev`` without ``--data-dir`` points to its status file:
    ``$XDG_RUNTIME_DIR/gnomon/dev-status.json``, else ``~/.gnomon/dev-status.json``."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return (
        os.path.join(base, "gnomon", "dev-status.json")
        if base
        else os.path.join(os.path.expanduser("~"), ".gnomon", "dev-status.json")
    )


@app.callback()
def main(
    ctx: typer.Context,
    api: str = typer.Option(
        "127.0.0.1:7070", "--api", help="host:port the public API (of the first region) listens on."
    ),
    demo: bool = typer.Option(False, "--demo", help="Also run a demo worker and create a few demo jobs."),
    dispatchers: int = typer.Option(
        1, "--dispatchers", min=1, max=16, help="Dispatcher processes per region."
    ),
    regions: str = typer.Option(
        "",
        "--regions",
        help="Comma-separated regions, e.g. eu,us: one set of "
        "services per region on the one database and etcd (default: region local).",
    ),
    data_dir: str = typer.Option(
        "",
        "--data-dir",
        help="Where servers keep data and logs, kept after exit (default: a temp dir, removed on exit).",
    ),
    database_url: str = typer.Option(
        "", "--database-url", help="Use this database instead of embedded PostgreSQL."
    ),
) -> None:
    """Start PostgreSQL, etcd, api, planner, dispatcher(s) and reaper; stop everything on Ctrl-C."""
    if ctx.invoked_subcommand is None:
        dev(
            api=api,
            demo=demo,
            dispatchers=dispatchers,
            regions=regions,
            data_dir=data_dir,
            database_url=database_url,
        )


def dev(
    api: str = "127.0.0.1:7070",
    demo: bool = False,
    dispatchers: int = 1,
    regions: str = "",
    data_dir: str = "",
    database_url: str = "",
) -> None:
    """Runs the suite until SIGINT/SIGTERM (see :func:`main`)."""
    from gnomon.cli.suite import Suite

    region_list = [r.strip() for r in regions.split(",") if r.strip()]
    bad = [r for r in region_list if not _REGION.fullmatch(r)]
    if bad or len(set(region_list)) != len(region_list):
        typer.echo(
            f"error: --regions: need distinct names matching [a-z][a-z0-9-]{{0,31}}, got {regions!r}",
            err=True,
        )
        raise typer.Exit(2)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    typer.echo("starting embedded PostgreSQL and etcd ...")
    suite = Suite(
        api_listen=api,
        dispatchers=dispatchers,
        database_url=database_url or None,
        base_dir=data_dir or None,
        regions=region_list,
    )
    pointer = "" if data_dir else well_known_status_path()
    status_path = ""

    def write_status() -> None:
        suite.write_status(status_path)
        if pointer:
            os.makedirs(os.path.dirname(pointer), exist_ok=True)
            tmp = f"{pointer}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"pid": os.getpid(), "status": status_path}, f)
            os.replace(tmp, pointer)

    try:
        suite.start()
        status_path = os.path.join(suite.base_dir, STATUS_FILE)
        write_status()
        for p in suite.procs:
            region = f"{p.region:<8} " if region_list else ""
            typer.echo(
                f"  {p.role:<10} {region}pid {p.popen.pid:<7} {p.address:<22} "
                f"metrics http://{p.metrics_address}/metrics"
            )
        for r in region_list[1:]:
            typer.echo(f"Gnomon API of region {r} listening on {suite.api_address_of(r)}")
        typer.echo(f"Gnomon API listening on {suite.api_address}  (logs: {suite.log_dir})")
        typer.echo(
            f"try:  gnomon job create --api {suite.api_address} --queue demo --in 2s --payload '{{\"x\": 1}}'"
        )
        typer.echo(
            "      gnomon shards --api {}   |   gnomon dev status{}".format(
                suite.api_address, f" --data-dir {data_dir}" if data_dir else ""
            )
        )
        if demo:
            _demo(suite, stop, write_status)
        typer.echo("press Ctrl-C to stop")
        reported: set[int] = set()
        while not stop.is_set():
            for p in suite.procs:
                if p.popen.poll() is not None and p.role != "worker" and p.popen.pid not in reported:
                    reported.add(p.popen.pid)
                    typer.echo(
                        f"{p.role} of region {p.region} (pid {p.popen.pid}) exited with "
                        f"{p.popen.returncode}; see {p.log_path}"
                    )
                    if len(region_list) > 1:
                        # several regions: a region's processes may die (that is what failover is for);
                        # the others go on, and the logs are kept for a look afterwards
                        suite.keep_dir = True
                        write_status()
                    else:
                        suite.keep_dir = True  # the log it points to must outlive the stop
                        stop.set()
            stop.wait(0.5)
    finally:
        typer.echo("stopping ...")
        try:
            suite.stop()
        finally:
            _remove_status(status_path, pointer)
        typer.echo("stopped")


def _remove_status(status_path: str, pointer: str) -> None:
    """Removes this process's status file and the well-known pointer if it still points to it."""
    for path in (status_path, pointer):
        if not path:
            continue
        try:
            if path == pointer:
                with open(path) as f:
                    if json.load(f).get("pid") != os.getpid():
                        continue
            os.remove(path)
        except (OSError, ValueError):
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@app.command()
def status(
    data_dir: str = typer.Option(
        "",
        "--data-dir",
        help="The --data-dir the running `gnomon dev` was given "
        "(default: the one started without --data-dir).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """Show every process a running `gnomon dev` started: role, region, pid, gRPC and metrics address."""
    if data_dir:
        path = os.path.join(data_dir, STATUS_FILE)
    else:
        try:
            with open(well_known_status_path()) as f:
                path = json.load(f)["status"]
        except (OSError, ValueError, KeyError):
            typer.echo(
                f"error: no running `gnomon dev` found ({well_known_status_path()} missing); "
                "pass --data-dir if it was started with one",
                err=True,
            )
            raise typer.Exit(1) from None
    try:
        with open(path) as f:
            st = json.load(f)
    except (OSError, ValueError):
        typer.echo(f"error: no status file at {path}: is `gnomon dev` running?", err=True)
        raise typer.Exit(1) from None
    running = _pid_alive(int(st.get("pid", 0) or 0))
    for p in st["processes"]:
        p["alive"] = running and _pid_alive(p["pid"])
    out = {"running": running, **st}
    if json_out:
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(
            f"gnomon dev pid {st.get('pid')} {'running' if running else 'NOT RUNNING'}; "
            f"API {st.get('api', '')}; data in {st.get('base_dir', '')}"
        )
        typer.echo(f"  {'ROLE':<10} {'REGION':<10} {'PID':<7} {'GRPC':<22} {'METRICS':<22} ALIVE")
        for p in st["processes"]:
            typer.echo(
                f"  {p['role']:<10} {p['region']:<10} {p['pid']:<7} {p['address'] or '-':<22} "
                f"{p['metrics'] or '-':<22} {'yes' if p['alive'] else 'no'}"
            )
    if not running:
        raise typer.Exit(1)


def _demo(suite, stop: threading.Event, on_change=None) -> None:
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
            typer.echo(f"created    {j.name}  due {j.schedule_time.isoformat()}")
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
                    if first_seen_dispatched:
                        lag = (j.dispatch_time - j.schedule_time).total_seconds() * 1000
                        typer.echo(f"dispatched {n}  attempt {j.attempt}  dispatch lag {lag:.1f} ms")
                    if j.state == "SUCCEEDED":
                        typer.echo(f"finished   {n}  {j.state} at {j.finish_time.isoformat()}")
                    elif j.state not in ("SCHEDULED", "QUEUED", "RUNNING"):
                        typer.echo(f"{j.state.lower():<10} {n}  {j.last_error}")
            time.sleep(0.05)
    typer.echo("demo jobs done; the suite keeps running")
