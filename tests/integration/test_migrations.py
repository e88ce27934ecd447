"""Migrating an empty database to head yields exactly the SQLAlchemy models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from gnomon.common.storage.migrations import upgrade
from gnomon.common.storage.schema import metadata
from gnomon.common.storage.schema_base import fillfactors


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
            "queue_claims",
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


_INDEXES = (
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
    "AND tablename <> 'alembic_version' ORDER BY 1, 2"
)
_FILLFACTORS = (
    "SELECT c.relname, o.option_value FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, "
    "pg_options_to_table(c.reloptions) o WHERE n.nspname = 'public' AND c.relkind = 'r' "
    "AND o.option_name = 'fillfactor' ORDER BY 1"
)


def test_migrated_indexes_and_fillfactors_equal_the_models(pg_server):
    """What ``compare_metadata`` does not see: each index's full definition (partial predicates,
    uniqueness, column order) and each table's fillfactor, migrated against ``create_all``."""
    migrated, created = pg_server.create_database("idx_migrated"), pg_server.create_database("idx_created")
    try:
        upgrade(migrated)
        defs = {}
        for name, url in (("migrated", migrated), ("created", created)):
            engine = create_engine(url)
            if name == "created":
                metadata.create_all(engine)
            with engine.connect() as conn:
                defs[name] = (conn.execute(text(_INDEXES)).all(), conn.execute(text(_FILLFACTORS)).all())
            engine.dispose()
        assert defs["migrated"] == defs["created"]
        indexes, fill = defs["migrated"]
        assert (
            {r.relname: int(r.option_value) for r in fill}
            == fillfactors()
            == {"attempts": 50, "queue_claims": 50}
        )
        by_name = {r.indexname: r.indexdef for r in indexes}
        assert "WHERE (request_id IS NOT NULL)" in by_name["uq_jobs_request_id"]
        assert "WHERE (finished_at IS NULL)" in by_name["ix_attempts_open"]
        # no attempts index holds a column the accept or the heartbeat writes (they stay HOT)
        on_attempts = [d.split(" USING ", 1)[1] for d in by_name.values() if " ON public.attempts " in d]
        assert len(on_attempts) == 3  # primary key, open, finished
        for written in ("state", "lease_expires_at", "token", "owner", "worker_id", "accepted_at"):
            assert not [d for d in on_attempts if written in d], written
    finally:
        pg_server.drop_database("idx_migrated")
        pg_server.drop_database("idx_created")
