"""``gnomon console``: the web console (services/console, docs/console.md) against an API.

It connects to the API like every client (address, CA, client certificate, server name from the
options, else the environment and profile: :func:`gnomon.sdk.connection.resolve`) but never uses a
key of its own: users sign in with theirs. :func:`spawn` starts it as a process of a local suite
(``gnomon dev``, the tests).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from gnomon.cli.suite import Proc, Suite

__all__ = ["console", "spawn", "split_listen"]

#: Client variables a spawned console must not inherit: it has no key of its own.
_KEY_VARIABLES = ("GNOMON_API_KEY", "GNOMON_API_KEY_FILE")


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> ``(host, port)``. Raises ``ValueError``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--listen needs host:port, got {listen!r}")
    return host.strip("[]"), int(port)


def console(
    listen: str = typer.Option("127.0.0.1:7080", "--listen", help="host:port the console serves HTTP(S) on."),
    api: str | None = typer.Option(
        None, "--api", help="host:port of the Gnomon API [default: GNOMON_API, else the profile's]."
    ),
    ca_file: str | None = typer.Option(
        None,
        "--ca-file",
        help="CA bundle the API's certificate is checked with [default: GNOMON_TLS_CA_FILE, profile].",
    ),
    client_cert_file: str | None = typer.Option(
        None, "--client-cert-file", help="Client certificate (mTLS)."
    ),
    client_key_file: str | None = typer.Option(None, "--client-key-file", help="Its key."),
    server_name: str | None = typer.Option(None, "--server-name", help="TLS server name of the API."),
    insecure: bool = typer.Option(False, "--insecure", help="Plaintext to an API that runs without TLS."),
    profile: str | None = typer.Option(None, "--profile", help="Client profile to read the settings from."),
    tls_cert_file: str | None = typer.Option(
        None, "--tls-cert-file", help="Serve HTTPS with this certificate."
    ),
    tls_key_file: str | None = typer.Option(None, "--tls-key-file", help="... and this key."),
    regions: list[str] = typer.Option(
        [], "--region", help="A region of the deployment, summarized on the cluster page (repeat for each)."
    ),
    idle_timeout: float = typer.Option(
        8 * 3600, "--session-idle-timeout", help="Seconds before an idle session ends."
    ),
) -> None:
    """Serve the web console: jobs, schedules, queues, dead letters and the cluster, for users who
    sign in with their API key (every call is made with that key)."""
    from gnomon.console.service import serve
    from gnomon.sdk.connection import resolve

    try:
        host, port = split_listen(listen)
        base = resolve(
            api,
            ca_file=ca_file,
            client_cert_file=client_cert_file,
            client_key_file=client_key_file,
            server_name=server_name,
            insecure=True if insecure else None,
            profile=profile,
        )
        # the console holds no key of its own: every call carries the signed-in user's key
        base = dataclasses.replace(base, api_key=None)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if bool(tls_cert_file) != bool(tls_key_file):
        typer.echo("error: --tls-cert-file and --tls-key-file go together", err=True)
        raise typer.Exit(2)
    scheme = "https" if tls_cert_file else "http"
    typer.echo(f"Gnomon console on {scheme}://{listen} for the API at {base.address}", err=True)
    try:
        serve(
            base,
            host,
            port,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            idle_timeout=idle_timeout,
            regions=regions,
        )
    except OSError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


def _taken(listen: str) -> bool:
    """True when something already listens on ``host:port`` (a bind to it fails)."""
    host, port = split_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def spawn(
    suite: Suite, listen: str | None = None, timeout_s: float = 30.0, *, fallback: bool = False
) -> Proc:
    """Starts ``gnomon console`` for ``suite``'s API as one more process of the suite (watched and
    stopped like the others; role ``console``, ``address`` its ``host:port``, log
    ``logs/console-<n>.log``) and waits until it answers ``/healthz`` with its own pid (not some
    other console on that port). It trusts the suite's CA but holds no key. ``listen`` None: a free
    loopback port; with ``fallback``, a free port of the same host when ``listen`` is taken (also
    when it was taken in the meantime and the console could not bind it). Raises ``TimeoutError``
    (the log's tail in the message) if it does not come up, ``ValueError`` for a malformed ``listen``."""
    from gnomon.cli.suite import _free_address

    if listen and fallback and _taken(listen):
        listen = _free_on(listen)
    listen = listen or _free_address()
    try:
        return _start(suite, listen, timeout_s)
    except TimeoutError:
        if not fallback:
            raise
    return _start(suite, _free_on(listen), timeout_s)


def _free_on(listen: str) -> str:
    """A free port on ``listen``'s host, as ``host:port``."""
    host, _ = split_listen(listen)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _start(suite: Suite, listen: str, timeout_s: float) -> Proc:
    """One try of :func:`spawn` on ``listen``; a console that does not come up is stopped and
    forgotten before ``TimeoutError`` is raised."""
    from gnomon.cli.suite import Proc, _watch

    n = sum(1 for p in suite.procs if p.role == "console")
    log_path = os.path.join(suite.log_dir, f"console-{n}.log")
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
    env.update({k: v for k, v in suite.client_env().items() if k not in _KEY_VARIABLES})
    env["PYTHONUNBUFFERED"] = "1"
    argv = [
        sys.executable,
        "-m",
        "gnomon.cli.main",
        "console",
        "--listen",
        listen,
        "--api",
        suite.api_address,
        *(a for r in suite.regions for a in ("--region", r)),
    ]
    with open(log_path, "ab") as logf:
        popen = subprocess.Popen(argv, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    p = Proc("console", listen, popen, log_path)
    _watch(p)
    suite.procs.append(p)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and popen.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{listen}/healthz", timeout=1) as r:
                if r.read().decode().split() == ["ok", str(popen.pid)]:
                    return p
        except OSError:
            pass
        time.sleep(0.1)
    suite.stop_proc(p)
    suite.procs.remove(p)
    with open(log_path, errors="replace") as f:
        tail = f.read()[-2000:]
    raise TimeoutError(f"console on {listen} did not come up in {timeout_s} s: {tail}")
