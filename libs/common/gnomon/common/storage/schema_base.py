"""The metadata every table of the schema registers on, its naming convention, and the column types
and table options the table modules share (:mod:`gnomon.common.storage.schema` re-exports them)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import DDL, DateTime, MetaData, Table, event

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

#: Every instant is a ``timestamptz`` (UTC).
TS = DateTime(timezone=True)


def with_fillfactor(table: Table, percent: int) -> Table:
    """Gives ``table`` the PostgreSQL storage parameter ``fillfactor = percent`` (10..100): inserts
    leave ``100 - percent`` % of each heap page free, so an update of a row that changes no indexed
    column (keys and partial-index predicates alike) can put the new version on the same page: a
    HOT update, which writes no index entry (PostgreSQL docs, "Heap-Only Tuples (HOT)" and
    ``CREATE TABLE ... WITH (fillfactor)``). Recorded in ``table.info["fillfactor"]`` (the migration
    test compares it with the database's ``pg_class.reloptions``) and emitted after ``CREATE TABLE``
    on PostgreSQL only: CockroachDB has no heap pages and no fillfactor. Returns ``table``."""
    if not 10 <= percent <= 100:
        raise ValueError(f"fillfactor must be within 10..100, not {percent}")
    table.info["fillfactor"] = percent
    ddl = DDL(f"ALTER TABLE {table.name} SET (fillfactor = {percent})")  # type: ignore[no-untyped-call]
    event.listen(table, "after_create", ddl.execute_if(dialect="postgresql"))
    return table


def fillfactors() -> dict[str, Any]:
    """``{table name: fillfactor}`` of the tables of :data:`metadata` that set one."""
    return {t.name: t.info["fillfactor"] for t in metadata.sorted_tables if "fillfactor" in t.info}
