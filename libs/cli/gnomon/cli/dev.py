"""``gnomon dev``: the whole suite on one machine with embedded PostgreSQL and etcd;
``gnomon dev status``: what a running ``gnomon dev`` started.

Needs the development servers (:mod:`gnomon.devservers`, the ``gnomon[dev]`` extra); without them
``gnomon dev`` exits 1 with a one-line hint. Files a running ``gnomon dev`` keeps in its data dir:

* ``dev.lock``: held (``flock``) while it runs, so a second ``gnomon dev`` on the same dir fails
  at once with a one-line error instead of fighting over the servers;
* ``status.starting.json``: written from the moment the data dir exists until every service serves
  (``state: starting``; PostgreSQL and etcd as soon as they are up, services once spawned);
* ``status.json``: the same document with ``state: ready`` once every service serves; both are
  removed on exit;
* ``auth/``: the suite's CA, server certificate, service token and admin API key
  (:mod:`gnomon.cli.suite_auth`). Once ready, profile ``dev`` of the user's client config file points
  at them and becomes current (:mod:`gnomon.cli.dev_profile`), so client commands need no flags.

``gnomon dev status`` finds them through ``--data-dir``, through ``--api`` (every running
``gnomon dev`` registers ``<runtime dir>/gnomon/dev/<pid>.json`` with its API address), or through
the well-known pointer of the one started without ``--data-dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

import typer

from gnomon.cli.dev_certs import certs
from gnomon.common.config import DesktopSettings

if TYPE_CHECKING:
    from gnomon.cli.suite import Suite

app = typer.Typer(
    help="Run the whole suite on one machine (embedded PostgreSQL and etcd); "
    "`gnomon dev status` shows what a running one started.",
    invoke_without_command=True,
    no_args_is_help=False,
)

app.command("certs")(certs)

STATUS_FILE = "status.json"
STARTING_FILE = "status.starting.json"
LOCK_FILE = "dev.lock"
INSTALL_HINT = (
    "error: `gnomon dev` needs the development servers: pip install 'gnomon[dev]' (gnomon-devservers)"
)
_REGION = re.compile(r"[a-z][a-z0-9-]{0,31}")


def _runtime_dir() -> str:
    """``$XDG_RUNTIME_DIR/gnomon``, else ``~/.gnomon``."""
    base = DesktopSettings().xdg_runtime_dir
    return os.path.join(base, "gnomon") if base else os.path.join(os.path.expanduser("~"), ".gnomon")


def well_known_status_path() -> str:
    """Where a ``gnomon dev`` without ``--data-dir`` points to its status file:
    ``$XDG_RUNTIME_DIR/gnomon/dev-status.json``, else ``~/.gnomon/dev-status.json``."""
    return os.path.join(_runtime_dir(), "dev-status.json")


def _registry_dir() -> str:
    """One ``<pid>.json`` per running ``gnomon dev``: ``{"pid", "api", "base_dir"}``."""
    return os.path.join(_runtime_dir(), "dev")


def _write_json(path: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (temp file + rename), creating the directory."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


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
        help="Where servers keep data and logs, kept after exit and reused by the next "
        "`gnomon dev --data-dir` on it (default: a temp dir, removed on exit).",
    ),
    database_url: str = typer.Option(
        "", "--database-url", help="Use this database instead of embedded PostgreSQL."
    ),
    console: str = typer.Option(
        "127.0.0.1:7080",
        "--console",
        help="host:port of the web console (a free port if that one is taken; '' for none).",
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
            console=console,
        )
    else:  # `gnomon dev --api A status` / `gnomon dev --data-dir D status` select like the subcommand's flags
        source = ctx.get_parameter_source("api")  # click's ParameterSource (vendored by typer)
        given = source is not None and source.name != "DEFAULT"
        ctx.obj = {"api": api if given else None, "data_dir": data_dir or None}


@contextlib.contextmanager
def _data_dir_lock(data_dir: str) -> Iterator[None]:
    """Hold ``<data_dir>/dev.lock`` (``flock``, released by the kernel however we exit); exit 1 with a
    one-line error if another ``gnomon dev`` holds it."""
    os.makedirs(data_dir, exist_ok=True)
    f: IO[str] = open(os.path.join(data_dir, LOCK_FILE), "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            typer.echo(
                f"error: --data-dir {data_dir} is in use by another `gnomon dev` (pid {holder}); "
                "stop it or choose another dir",
                err=True,
            )
            raise typer.Exit(1) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        for name in (STATUS_FILE, STARTING_FILE):  # left by a `gnomon dev` that was killed
            _remove(os.path.join(data_dir, name))
        yield
    finally:
        f.close()


def dev(
    api: str = "127.0.0.1:7070",
    demo: bool = False,
    dispatchers: int = 1,
    regions: str = "",
    data_dir: str = "",
    database_url: str = "",
    console: str = "127.0.0.1:7080",
) -> None:
    """Runs the suite until SIGINT/SIGTERM (see :func:`main`).

    Exits 1 with a one-line message, no traceback, if the dev servers are not installed, if the
    data dir is in use by another ``gnomon dev`` or cannot be used (e.g. as root inside a private
    folder), or if a server does not start (then with the server's log tail).
    """
    try:
        import gnomon.devservers  # noqa: F401  (the dev extra: fail before anything starts)
    except ImportError:
        typer.echo(INSTALL_HINT, err=True)
        raise typer.Exit(1) from None

    region_list = [r.strip() for r in regions.split(",") if r.strip()]
    bad = [r for r in region_list if not _REGION.fullmatch(r)]
    if bad or len(set(region_list)) != len(region_list):
        typer.echo(
            f"error: --regions: need distinct names matching [a-z][a-z0-9-]{{0,31}}, got {regions!r}",
            err=True,
        )
        raise typer.Exit(2)
    data_dir = os.path.abspath(data_dir) if data_dir else ""
    with _data_dir_lock(data_dir) if data_dir else contextlib.nullcontext():
        _run(api, demo, dispatchers, region_list, data_dir, database_url, console)


def _run(
    api: str,
    demo: bool,
    dispatchers: int,
    region_list: list[str],
    data_dir: str,
    database_url: str,
    console: str = "",
) -> None:
    from gnomon.cli.dev_profile import install_dev_profile, usage_lines
    from gnomon.cli.suite import Suite
    from gnomon.devservers import DataDirNotReachableError, EmbeddedServerError

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    typer.echo("starting embedded PostgreSQL and etcd ...")
    pointer = "" if data_dir else well_known_status_path()
    registry = os.path.join(_registry_dir(), f"{os.getpid()}.json")
    paths = {"status": "", "starting": ""}

    def on_progress(s: Suite, step: str) -> None:
        if step == "dir":
            assert s.base_dir
            paths["status"] = os.path.join(s.base_dir, STATUS_FILE)
            paths["starting"] = os.path.join(s.base_dir, STARTING_FILE)
            _write_json(registry, {"pid": os.getpid(), "api": s.api_listen, "base_dir": s.base_dir})
            if pointer:
                _write_json(pointer, {"pid": os.getpid(), "status": paths["status"]})
        s.write_status(paths["starting"], state="starting")

    suite = Suite(
        api_listen=api,
        dispatchers=dispatchers,
        database_url=database_url or None,
        base_dir=data_dir or None,
        regions=region_list,
        on_progress=on_progress,
        traces=True,  # spans of every service in <data dir>/traces.jsonl (docs/tracing.md)
    )

    def write_status() -> None:
        suite.write_status(paths["status"])

    try:
        try:
            suite.start()
        except DataDirNotReachableError as e:
            typer.echo(f"error: --data-dir {data_dir}: {e}" if data_dir else f"error: {e}", err=True)
            raise typer.Exit(1) from None
        except (EmbeddedServerError, TimeoutError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        os.environ.update(suite.client_env())  # this process's clients (the demo) reach the suite as admin
        console_line = _start_console(suite, console)
        try:
            profile_lines = usage_lines(suite, install_dev_profile(suite))
        except (OSError, ValueError) as e:
            profile_lines = [f"warning: client profile not written: {e}"]
        write_status()  # ready: status.json first, then the starting file goes (no gap for readers)
        _remove(paths["starting"])
        _print_ready(suite, region_list, profile_lines, console_line)
        if demo:
            from gnomon.cli.demo import run as run_demo

            run_demo(suite, stop, write_status)
        typer.echo("press Ctrl-C to stop")
        _watch(suite, stop, region_list, write_status)
    finally:
        typer.echo("stopping ...")
        try:
            suite.stop()
        finally:
            for path in (paths["status"], paths["starting"], registry):
                _remove(path)
            _remove_pointer(pointer)
        typer.echo("stopped")


def _print_ready(suite: Suite, region_list: list[str], profile_lines: list[str], console_line: str) -> None:
    """Prints the started processes, servers and addresses of ``suite``, and how to try it."""
    for p in (p for p in suite.procs if p.role != "console"):
        region = f"{p.region:<8} " if region_list else ""
        typer.echo(
            f"  {p.role:<10} {region}pid {p.popen.pid:<7} {p.address:<22} "
            f"metrics http://{p.metrics_address}/metrics"
        )
    for sv in suite.servers():
        typer.echo(f"  {sv['role']:<10} {'pid ' + str(sv['pid']) if sv['pid'] else '':<11} {sv['address']}")
    for r in region_list[1:]:
        typer.echo(f"Gnomon API of region {r} listening on {suite.api_address_of(r)}")
    typer.echo(f"Gnomon API listening on {suite.api_address}  (logs: {suite.log_dir})")
    chosen = os.environ.get("GNOMON_TRACES_EXPORTER")
    typer.echo(f"traces: GNOMON_TRACES_EXPORTER={chosen}" if chosen else f"traces: {suite.traces_file}")
    for line in profile_lines:
        typer.echo(line)
    if console_line:
        typer.echo(console_line)
    typer.echo(
        f"try:  gnomon job create --api {suite.api_address} --queue demo --in 2s --payload '{{\"x\": 1}}'"
    )
    typer.echo(
        f"      gnomon shards --api {suite.api_address}   |   gnomon dev status --api {suite.api_address}"
    )


def _watch(
    suite: Suite, stop: threading.Event, region_list: list[str], write_status: Callable[[], None]
) -> None:
    """Until ``stop``: reports a service process that exited (one region: stops the suite)."""
    reported: set[int] = set()
    while not stop.is_set():
        for p in suite.procs:
            if p.popen.poll() is not None and p.role != "worker" and p.popen.pid not in reported:
                if p.role == "console":  # the suite goes on without its console
                    reported.add(p.popen.pid)
                    typer.echo(f"console exited with {p.popen.returncode}; see {p.log_path}")
                    continue
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


def _start_console(suite: Suite, listen: str) -> str:
    """Starts the web console on ``listen`` (a free port when that one is taken; nothing for "");
    returns the line that says where it is and which key signs in, or a warning if it did not start."""
    if not listen:
        return ""
    from gnomon.cli.console import spawn

    try:
        p = spawn(suite, listen, fallback=True)
    except (TimeoutError, ValueError, OSError) as e:
        return f"warning: the web console did not start: {e}"
    key = suite.credentials.admin_key_file if suite.credentials else "(any: the suite is insecure)"
    return f"Gnomon console on http://{p.address}  (sign in with the admin API key in {key})"


def _remove(path: str) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.remove(path)


def _remove_pointer(pointer: str) -> None:
    """Removes the well-known pointer if it still points to this process."""
    if not pointer:
        return
    try:
        with open(pointer) as f:
            if json.load(f).get("pid") != os.getpid():
                return
        os.remove(pointer)
    except (OSError, ValueError):
        pass


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child of a dead parent can linger as a zombie until init reaps it
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _live_registry() -> list[dict[str, Any]]:
    """Registry entries of running ``gnomon dev`` processes; entries of dead ones are removed."""
    out = []
    try:
        names = sorted(os.listdir(_registry_dir()))
    except OSError:
        return []
    for name in names:
        path = os.path.join(_registry_dir(), name)
        try:
            with open(path) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            continue
        if _pid_alive(int(entry.get("pid", 0) or 0)):
            out.append(entry)
        else:
            _remove(path)  # left by a `gnomon dev` that was killed
    return out


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _status_dir(data_dir: str | None, api: str | None) -> str:
    """The data dir of the ``gnomon dev`` to report on: ``--data-dir``; else the one whose API is
    ``--api``; else the one started without ``--data-dir``; else the only one running."""
    if data_dir:
        return data_dir
    running = _live_registry()
    if api:
        match = [e for e in running if e.get("api") == api]
        if not match:
            others = ", ".join(str(e.get("api")) for e in running) or "none"
            _fail(f"no running `gnomon dev` has its API on {api} (running: {others})")
        return str(match[0]["base_dir"])
    try:
        with open(well_known_status_path()) as f:
            return os.path.dirname(str(json.load(f)["status"]))
    except (OSError, ValueError, KeyError):
        pass
    if len(running) == 1:
        return str(running[0]["base_dir"])
    if running:
        apis = ", ".join(str(e.get("api")) for e in running)
        _fail(f"{len(running)} `gnomon dev` are running (APIs {apis}); pick one with --api or --data-dir")
    _fail(
        f"no running `gnomon dev` found ({well_known_status_path()} missing); "
        "pass --data-dir if it was started with one"
    )
    raise AssertionError("unreachable")


def _read_status(base_dir: str) -> dict[str, Any]:
    """``status.json`` of ``base_dir``, else its ``status.starting.json``; exit 1 if neither."""
    for name in (STATUS_FILE, STARTING_FILE):
        try:
            with open(os.path.join(base_dir, name)) as f:
                doc: dict[str, Any] = json.load(f)
            doc.setdefault("state", "ready")
            return doc
        except (OSError, ValueError):
            continue
    _fail(f"no status file at {os.path.join(base_dir, STATUS_FILE)}: is `gnomon dev` running?")
    raise AssertionError("unreachable")


@app.command()
def status(
    ctx: typer.Context,
    data_dir: str | None = typer.Option(
        None,
        "--data-dir",
        help="The --data-dir the running `gnomon dev` was given "
        "(default: the one with --api, else the one started without --data-dir).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print as JSON."),
    api: str | None = typer.Option(
        None,
        "--api",
        envvar="GNOMON_API",
        help="host:port of the Gnomon API: report on the `gnomon dev` serving it.",
    ),
) -> None:
    """Show what a running `gnomon dev` started: PostgreSQL and etcd (pid, address) and every process
    (role, region, pid, gRPC and metrics address). Answers from the moment its data dir exists; while
    services are still coming up the state is `starting`. Exits 1 if that `gnomon dev` is not running."""
    parent = ctx.obj if isinstance(ctx.obj, dict) else {}
    base_dir = _status_dir(data_dir or parent.get("data_dir"), api or parent.get("api"))
    st = _read_status(base_dir)
    running = _pid_alive(int(st.get("pid", 0) or 0))
    for p in st.get("processes", []):
        p["alive"] = running and _pid_alive(int(p["pid"]))
    for sv in st.get("servers", []):
        sv["alive"] = running and sv.get("pid") is not None and _pid_alive(int(sv["pid"]))
    out = {"running": running, **st}
    if json_out:
        typer.echo(json.dumps(out, indent=2))
    else:
        state = st["state"] if running else "NOT RUNNING"
        typer.echo(
            f"gnomon dev pid {st.get('pid')} {'running, ' if running else ''}{state}; "
            f"API {st.get('api', '')}; data in {st.get('base_dir', '')}"
        )
        typer.echo(f"  {'SERVER':<10} {'NAME':<10} {'PID':<7} {'ADDRESS':<45} ALIVE")
        for sv in st.get("servers", []):
            typer.echo(
                f"  {sv['role']:<10} {sv['name']:<10} {sv['pid'] or '-':<7} {sv['address']:<45} "
                f"{'yes' if sv['alive'] else ('-' if sv['pid'] is None else 'no')}"
            )
        typer.echo(f"  {'ROLE':<10} {'REGION':<10} {'PID':<7} {'GRPC':<22} {'METRICS':<22} ALIVE")
        for p in st.get("processes", []):
            typer.echo(
                f"  {p['role']:<10} {p['region']:<10} {p['pid']:<7} {p['address'] or '-':<22} "
                f"{p['metrics'] or '-':<22} {'yes' if p['alive'] else 'no'}"
            )
    if not running:
        raise typer.Exit(1)
