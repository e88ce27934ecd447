"""Runs the whole Gnomon suite on one machine: embedded PostgreSQL + etcd and every service as its
own process. Used by ``gnomon dev``, by the integration tests and by the benchmarks.

The servers come from :mod:`gnomon.devservers` (the ``gnomon[dev]`` extra), imported only when a
suite starts, so ``gnomon`` without the dev extra still imports this module.

No process outlives the suite's owner: PostgreSQL and etcd are registered with the
:class:`gnomon.devservers.Watchdog` by the servers themselves, and every service and worker process
started here is registered with it too (its own session, so its process group id is its pid). When
the owner dies, even by SIGKILL, the watchdog's pipe hits EOF and it SIGKILLs those process groups,
stops PostgreSQL (``pg_ctl stop -m immediate``) and kills etcd (see :mod:`gnomon.devservers.watchdog`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.cli.suite_auth import (
    PROFILE_FILE,
    SuiteCredentials,
    bootstrap_admin,
    ensure_credentials,
    write_suite_profile,
)
from gnomon.common.config import DevServerSettings
from gnomon.sdk.connection import resolve

if TYPE_CHECKING:
    from gnomon.devservers import EtcdCluster, PostgresServer


def _free_address() -> str:
    from gnomon.devservers import free_port

    return f"127.0.0.1:{free_port()}"


def _watch(p: Proc) -> None:
    """Register ``p`` with the watchdog: SIGKILL its process group if the suite's owner dies."""
    from gnomon.devservers import Watchdog

    Watchdog.add(_watch_key(p), kill=[p.popen.pid])


def _unwatch(p: Proc) -> None:
    from gnomon.devservers import Watchdog

    Watchdog.remove(_watch_key(p))


def _watch_key(p: Proc) -> str:
    return f"suite-{p.role}-{p.popen.pid}"


@dataclass
class Proc:
    """One child process of the suite."""

    role: str
    address: str
    popen: subprocess.Popen[bytes]
    log_path: str
    region: str = "local"
    metrics_address: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly description."""
        return {
            "role": self.role,
            "region": self.region,
            "pid": self.popen.pid,
            "address": self.address,
            "metrics": self.metrics_address,
            "log": self.log_path,
            "alive": self.popen.poll() is None,
        }


def wait_healthy(
    address: str,
    timeout_s: float = 30.0,
    service: str = "",
    *,
    ca_file: str | None = None,
    insecure: bool | None = None,
) -> None:
    """Blocks until ``grpc.health.v1`` at ``address`` says SERVING; raises ``TimeoutError``. Over TLS
    trusting ``ca_file``; plaintext when ``insecure``; else as the client settings say
    (:func:`gnomon.sdk.connection.resolve`: environment, then profile). Health needs no credential."""
    deadline = time.monotonic() + timeout_s
    if ca_file is not None:
        with open(ca_file, "rb") as f:
            channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
    else:
        channel = resolve(address, insecure=insecure).channel()
    with channel as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"{address} not SERVING after {timeout_s} s")


@dataclass
class Suite:
    """The servers and processes of one local installation.

    ``database_url``: use an existing database instead of starting PostgreSQL (migrated on start).
    ``durable``: keep fsync/synchronous_commit on in the embedded PostgreSQL (benchmarks).
    ``env``: extra ``GNOMON_*`` settings for every service. A ``base_dir`` the suite created itself
    (a temp dir) is removed on :meth:`stop` unless ``keep_dir``.
    ``regions``: one set of services (api, dispatcher(s), planner, reaper, each with ``GNOMON_REGION``)
    per region, all on the one database and etcd; the first region's API listens on ``api_listen``,
    the others on free ports. Empty (the default): one set without ``GNOMON_REGION`` (region "local").
    ``on_progress``: called with the suite and a step name (``"dir"``, ``"postgres"``, ``"migrated"``,
    ``"etcd"``, ``"spawned"``) as :meth:`start` goes, so ``gnomon dev`` can report "starting".

    Secure by default: the services serve TLS with a development CA's loopback certificate and
    authenticate every call (:mod:`gnomon.cli.suite_auth`); the credentials live in
    ``<base_dir>/auth`` (or ``credentials_dir``, made once and shared by several suites), the admin's
    API key is added to the database after the migrations, and ``<base_dir>/auth/profile.toml`` is a
    client config file for the suite (``GNOMON_CONFIG_FILE``). ``insecure``: plaintext, no
    authentication (``GNOMON_INSECURE=true``). ``traces`` (``gnomon dev``): every service appends its
    spans to :attr:`traces_file`, unless the environment chooses ``GNOMON_TRACES_EXPORTER`` itself.

    A given ``base_dir`` that holds a previous suite is reused: the PostgreSQL cluster and its
    ``gnomon`` database, and the etcd member (on its recorded ports); migrations are re-run (they
    are idempotent).
    """

    api_listen: str = "127.0.0.1:7070"
    dispatchers: int = 1
    database_url: str | None = None
    durable: bool = False
    base_dir: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    keep_dir: bool = False
    regions: list[str] = field(default_factory=list)
    pg: PostgresServer | None = None
    etcd: EtcdCluster | None = None
    procs: list[Proc] = field(default_factory=list)
    on_progress: Callable[[Suite, str], None] | None = None
    credentials_dir: str | None = None
    insecure: bool = False
    credentials: SuiteCredentials | None = None
    profile_file: str | None = None
    traces: bool = False

    def start(self) -> Suite:
        """Starts servers, migrates, starts api, planner, dispatcher(s), reaper; waits until healthy.

        Raises ``ImportError`` without the dev extra (``gnomon.devservers``),
        ``gnomon.devservers.EmbeddedServerError`` (``DataDirNotReachableError``: one line) if a
        server does not start, ``TimeoutError`` if a service is not SERVING within 30 s.
        """
        from gnomon.common.storage.migrations import upgrade
        from gnomon.devservers import EtcdCluster, PostgresServer

        self._own_dir = self.base_dir is None
        self.base_dir = self.base_dir or tempfile.mkdtemp(prefix="gnomon-dev-")
        os.makedirs(self.base_dir, exist_ok=True)
        os.chmod(self.base_dir, 0o755)  # the PostgreSQL server runs as OS user postgres and must traverse it
        self.log_dir = os.path.join(self.base_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        if not self.insecure:
            self.credentials = ensure_credentials(self.credentials_dir or os.path.join(self.base_dir, "auth"))
        self._progress("dir")
        if self.database_url is None:
            self.pg = PostgresServer(
                os.path.join(self.base_dir, "pg"), durable=self.durable, **DevServerSettings().model_dump()
            ).start()
            self._progress("postgres")
            # exist_ok: a restart on the same base_dir reuses the database (migrations are idempotent)
            self.database_url = self.pg.create_database("gnomon", exist_ok=True)
        upgrade(self.database_url)
        if self.credentials is not None:
            bootstrap_admin(self.database_url, self.credentials)
        self._progress("migrated")
        self.etcd = EtcdCluster(1, os.path.join(self.base_dir, "etcd")).start()
        self._progress("etcd")
        for i, region in enumerate(self.regions or [None]):
            env = {"GNOMON_REGION": region} if region else None
            self.start_service("api", self.api_listen if i == 0 else None, env=env)
            for _ in range(self.dispatchers):
                self.start_service("dispatcher", env=self.dispatcher_env(region))
            self.start_service("planner", env=env)
            self.start_service("reaper", env=env)
        self._progress("spawned")
        ca = self.credentials.ca_file if self.credentials else None
        for p in self.procs:
            wait_healthy(p.address, ca_file=ca, insecure=ca is None or None)
        auth_dir = os.path.join(self.base_dir, "auth")
        os.makedirs(auth_dir, mode=0o700, exist_ok=True)
        self.profile_file = write_suite_profile(
            os.path.join(auth_dir, PROFILE_FILE), self.api_address, self.credentials
        )
        return self

    def client_env(self) -> dict[str, str]:
        """The ``GNOMON_*`` variables that make a client (SDK, CLI, worker) reach this suite's API as
        its admin (TLS with its CA, its admin key), or plaintext for an insecure suite."""
        address = {"GNOMON_API": self.api_address} if self.procs else {}
        if self.credentials is None:
            return {**address, "GNOMON_INSECURE": "true"}
        return {**address, **self.credentials.client_env()}

    def _progress(self, step: str) -> None:
        if self.on_progress is not None:
            self.on_progress(self, step)

    def dispatcher_env(self, region: str | None) -> dict[str, str] | None:
        """A dispatcher's extra environment: its region and, with several regions, standby for
        every other one (docs/regions.md)."""
        if not region:
            return None
        others = [r for r in self.regions if r != region]
        return {
            "GNOMON_REGION": region,
            **({"GNOMON_DISPATCHER_STANDBY_FOR": ",".join(others)} if others else {}),
        }

    @property
    def api_address(self) -> str:
        """host:port of the (first region's) API."""
        return next(p.address for p in self.procs if p.role == "api")

    def api_address_of(self, region: str) -> str:
        """host:port of the (latest started, live if any) API of ``region``."""
        apis = [p for p in self.procs if p.role == "api" and p.region == region]
        live = [p for p in apis if p.popen.poll() is None]
        return (live or apis)[-1].address

    def service_env(self, listen: str) -> dict[str, str]:
        """The environment a service process gets."""
        assert self.database_url is not None and self.etcd is not None, "start() first"
        env = dict(os.environ)
        env.update(
            {
                "GNOMON_DATABASE_URL": self.database_url,
                "GNOMON_ETCD_ENDPOINTS": ",".join(self.etcd.endpoints),
                "GNOMON_LISTEN": listen,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.credentials is not None:
            env.update(self.credentials.service_env())
        else:
            env.update({"GNOMON_INSECURE": "true", "GNOMON_TLS_CERT_FILE": "", "GNOMON_TLS_KEY_FILE": ""})
        if self.traces and "GNOMON_TRACES_EXPORTER" not in os.environ:
            env.update({"GNOMON_TRACES_EXPORTER": "file", "GNOMON_TRACES_FILE": self.traces_file})
        env.update({k: str(v) for k, v in self.env.items()})
        return env

    @property
    def traces_file(self) -> str:
        """Where the services append their spans when :attr:`traces` is on (``<base_dir>/traces.jsonl``)."""
        assert self.base_dir is not None, "start() first"
        return os.path.join(self.base_dir, "traces.jsonl")

    def start_service(self, role: str, listen: str | None = None, env: dict[str, str] | None = None) -> Proc:
        """Starts ``gnomon <role>`` as a child process on ``listen`` (default: a free loopback port),
        in its own session, registered with the watchdog (killed if this process dies)."""
        listen = listen or _free_address()
        e = self.service_env(listen)
        e["GNOMON_METRICS_LISTEN"] = _free_address()
        e.update(env or {})
        region = (env or {}).get("GNOMON_REGION")
        n = sum(1 for p in self.procs if p.role == role and (region is None or p.region == region))
        log_path = os.path.join(self.log_dir, f"{role}-{region}-{n}.log" if region else f"{role}-{n}.log")
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                [sys.executable, "-m", "gnomon.cli.main", role],
                env=e,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        p = Proc(role, listen, popen, log_path, e.get("GNOMON_REGION", "local"), e["GNOMON_METRICS_LISTEN"])
        _watch(p)
        self.procs.append(p)
        return p

    def start_worker(
        self,
        queues: list[str],
        handler: str,
        *,
        concurrency: int = 16,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
    ) -> Proc:
        """Starts ``gnomon worker`` for ``handler`` (module:function) as a child process, registered
        with the watchdog like the services, authenticated as the suite's admin (:meth:`client_env`;
        ``env`` may override it)."""
        n = sum(1 for p in self.procs if p.role == "worker")
        log_path = os.path.join(self.log_dir, f"worker-{n}.log")
        args = [
            sys.executable,
            "-m",
            "gnomon.cli.main",
            "worker",
            "--api",
            self.api_address,
            "--handler",
            handler,
            "--concurrency",
            str(concurrency),
            *sum((["--queue", q] for q in queues), []),
            *(extra or []),
        ]
        e = dict(os.environ, PYTHONUNBUFFERED="1", **self.client_env(), **(env or {}))
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                args, env=e, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        p = Proc("worker", "", popen, log_path)
        _watch(p)
        self.procs.append(p)
        return p

    def start_worker_command(
        self, argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> Proc:
        """Starts any worker program (``argv``, e.g. a TypeScript worker under ``node``) as a child
        process like :meth:`start_worker`: registered with the watchdog, stopped (SIGTERM) with the
        suite, its output in ``logs/worker-<n>.log``, and with :meth:`client_env` in its environment
        (the ``GNOMON_*`` variables every SDK reads: API address, CA, admin key; ``env`` may override)."""
        n = sum(1 for p in self.procs if p.role == "worker")
        log_path = os.path.join(self.log_dir, f"worker-{n}.log")
        e = dict(os.environ, **self.client_env(), **(env or {}))
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                argv, cwd=cwd, env=e, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        p = Proc("worker", "", popen, log_path)
        _watch(p)
        self.procs.append(p)
        return p

    def stop_proc(self, p: Proc, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        """Signals one process and waits for it (SIGKILL after ``timeout_s``); returns its exit code."""
        try:
            if p.popen.poll() is None:
                try:
                    p.popen.send_signal(sig)
                    return p.popen.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    p.popen.kill()
                    return p.popen.wait()
            return p.popen.returncode
        finally:
            if p.popen.returncode is not None:  # reaped: its pid may be reused, the watchdog must forget it
                _unwatch(p)

    def stop(self) -> None:
        """Stops workers, then services, then etcd and PostgreSQL."""
        order = {"worker": 0, "api": 1, "planner": 1, "reaper": 1, "dispatcher": 2}
        for p in sorted(self.procs, key=lambda p: order.get(p.role, 1)):
            self.stop_proc(p)
        if self.etcd:
            self.etcd.stop()
        if self.pg:
            self.pg.stop()
        if getattr(self, "_own_dir", False) and not self.keep_dir and self.base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def status(self) -> list[dict[str, Any]]:
        """Every process started, as dicts."""
        return [p.as_dict() for p in self.procs]

    def servers(self) -> list[dict[str, Any]]:
        """PostgreSQL and each etcd member started so far, as dicts: ``role`` (``postgres``/``etcd``),
        ``name``, ``pid`` (None if not running or external), ``address`` (``host:port``; for the
        embedded PostgreSQL back end ``<socket dir>:port``), ``data_dir`` and ``log`` (None if
        external). With ``database_url`` given, PostgreSQL is listed as ``external``."""
        out: list[dict[str, Any]] = []
        if self.pg is not None and self.pg.port is not None:
            out.append(
                {
                    "role": "postgres",
                    "name": self.pg.backend or "",
                    "pid": self.pg.pid,
                    "address": self.pg.address,
                    "data_dir": self.pg.data_dir,
                    "log": self.pg.log_path,
                }
            )
        elif self.database_url:
            u = urlsplit(self.database_url)
            address = f"{u.hostname}:{u.port or 5432}" if u.hostname else "(unix socket)"
            out.append(
                {
                    "role": "postgres",
                    "name": "external",
                    "pid": None,
                    "address": address,
                    "data_dir": None,
                    "log": None,
                }
            )
        for m in self.etcd.members if self.etcd else []:
            out.append(
                {
                    "role": "etcd",
                    "name": m.name,
                    "pid": m.pid,
                    "address": m.endpoint,
                    "data_dir": m.data_dir,
                    "log": m.log_path,
                }
            )
        return out

    def write_status(self, path: str, state: str = "ready") -> None:
        """Writes :meth:`status`, :meth:`servers` and endpoints as JSON to ``path`` (atomically: a
        reader never sees a partial file). ``pid`` is this (the suite owner's) process; ``state`` is
        ``"starting"`` or ``"ready"``; ``api`` is the first region's API address (the one asked for
        while starting); ``insecure``, ``ca_file``, ``api_key_file`` and ``profile`` (the client
        config file ``auth/profile.toml``, None until ready) say how to connect."""
        has_api = any(p.role == "api" for p in self.procs)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "state": state,
                    "base_dir": self.base_dir,
                    "regions": list(dict.fromkeys(p.region for p in self.procs if p.role == "api")),
                    "api": self.api_address if has_api else self.api_listen,
                    "processes": self.status(),
                    "servers": self.servers(),
                    "database_url": self.database_url,
                    "etcd": self.etcd.endpoints if self.etcd else [],
                    "insecure": self.insecure,
                    "ca_file": self.credentials.ca_file if self.credentials else None,
                    "api_key_file": self.credentials.admin_key_file if self.credentials else None,
                    "profile": self.profile_file,
                },
                f,
                indent=2,
            )
        os.replace(tmp, path)

    def __enter__(self) -> Suite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
