"""Migration 0018 on a database that already has namespaces: a worker-stream quota left at 0 (which
meant "no limit" and was what every namespace got unless set) becomes NULL, so every namespace
created before gets the dispatcher's default stream quotas; a quota a namespace had set is kept."""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from gnomon.common.quotas import STREAM_QUOTAS
from gnomon.common.storage.migrations import config, upgrade

_INSERT = (
    "INSERT INTO namespaces (name, description, retention_s, max_create_rate, max_pending_jobs, "
    "max_schedules, max_worker_streams, max_queues_per_hello, version, created_at, updated_at) "
    "VALUES (:n, '', 0, 0, 5, 0, :s, :q, 1, now(), now())"
)


def test_existing_namespaces_get_the_default_stream_quotas(pg_server):
    url = pg_server.create_database("migrate_stream_quotas")
    try:
        before = ScriptDirectory.from_config(config(url)).get_revision("0018").down_revision
        upgrade(url, str(before))  # the revision before 0018, wherever it is chained
        engine = create_engine(url)
        with engine.begin() as c:
            c.execute(text(_INSERT), [{"n": "old", "s": 0, "q": 0}, {"n": "set", "s": 7, "q": 3}])
        upgrade(url)
        with engine.connect() as c:
            rows = {
                r.name: r
                for r in c.execute(
                    text(f"SELECT name, max_pending_jobs, {', '.join(STREAM_QUOTAS)} FROM namespaces")
                )
            }
        engine.dispose()
        assert [getattr(rows["old"], f) for f in STREAM_QUOTAS] == [None] * 5
        assert [getattr(rows["default"], f) for f in STREAM_QUOTAS] == [None] * 5
        assert (rows["set"].max_worker_streams, rows["set"].max_queues_per_hello) == (7, 3)
        assert rows["set"].max_worker_streams_per_principal is None and rows["old"].max_pending_jobs == 5
    finally:
        pg_server.drop_database("migrate_stream_quotas")
