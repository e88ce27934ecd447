"""Migrating an empty database to head yields exactly the SQLAlchemy models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from gnomon.common.storage.migrations import upgrade
from gnomon.common.storage.schema import metadata


def test_migrate_from_empty_equals_models(pg_server):
    url = pg_server.create_database("migrate_from_empty")
    try:
        upgrade(url)
        upgrade(url)  # idempotent
        engine = create_engine(url)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
            tables = set(inspect(conn).get_table_names())
        engine.dispose()
        assert diff == []
        assert tables == {
            "jobs",
            "attempts",
            "shard_owners",
            "audit_log",
            "dlq_replays",
            "queue_state",
            "schedules",
            "schedule_occurrences",
            "catchup_budget",
            "queue_limits",
            "region_owners",
            "namespaces",
            "principals",
            "api_keys",
            "grants",
            "alembic_version",
        }
    finally:
        pg_server.drop_database("migrate_from_empty")
