"""The write-set counters of ``bench.write_set`` on a real PostgreSQL: statements with known effects
must give the known figures (heap inserts, HOT and non-HOT updates, deletes, row locks, index tuples
including those carried by leaf splits, commits, statements and transactions), whatever the timing.

The server is this module's own: it preloads ``pg_stat_statements`` and runs without autovacuum, so
nothing but the statements below writes in a window."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from bench.write_set import Monitor
from bench.write_set_figures import Window, figures
from gnomon.common.config import DevServerSettings
from gnomon.devservers import PostgresServer


@pytest.fixture(scope="module")
def counted_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL with pg_stat_statements preloaded and autovacuum off."""
    settings: dict[str, object] = {"shared_preload_libraries": "pg_stat_statements", "autovacuum": "off"}
    with PostgresServer(durable=False, settings=settings, **DevServerSettings().model_dump()) as pg:
        yield pg


@pytest.fixture
def db(counted_pg: PostgresServer) -> Iterator[tuple[Monitor, psycopg.Connection]]:
    """(a Monitor, an autocommit work connection) on a fresh database holding table ``t`` (primary
    key ``id``, an index on ``v``, ``w`` in no index; fillfactor 50 so that updates fit their page)."""
    name = f"ws_{uuid.uuid4().hex[:12]}"
    counted_pg.create_database(name)
    mon = Monitor(counted_pg.conninfo(name))
    work = psycopg.connect(counted_pg.conninfo(name), autocommit=True)
    work.execute("CREATE TABLE t (id int PRIMARY KEY, v int, w text) WITH (fillfactor = 50)")
    work.execute("CREATE INDEX t_v ON t (v)")
    work.execute("SELECT pg_stat_force_next_flush()")  # these transactions published before any mark
    try:
        yield mon, work
    finally:
        work.close()
        mon.close()
        counted_pg.drop_database(name)


def measured(mon: Monitor, work_fn) -> tuple[Window, dict]:
    """Runs ``work_fn`` between two marks; returns the window and its totals."""
    start = mon.mark()
    work_fn()
    w = mon.window(start, mon.mark())
    return w, figures(w, 1)["totals"]


def test_insert_counts_heap_tuples_and_index_tuples_also_those_carried_by_leaf_splits(db):
    mon, work = db
    w, t = measured(
        mon, lambda: work.execute("INSERT INTO t SELECT g, g, 'x' FROM generate_series(1, 1901) g")
    )
    assert t["heap_inserts"] == 1901
    assert t["index_tuples"] == 2 * 1901  # two indexes, one tuple each per row
    # 1901 keys do not fit one leaf: some tuples went in with a leaf split's record, not INSERT_LEAF
    assert any(g.rtype.startswith("SPLIT") and g.leaf for g in w.groups)
    assert sum(g.count for g in w.groups if g.rtype == "INSERT_LEAF") < 2 * 1901
    assert t["commits"] == 1
    assert t["non_hot_updates"] == t["hot_updates"] == t["deletes"] == 0


def test_splits_above_the_leaves_add_no_index_tuple(db):
    mon, work = db
    # ~960-byte keys that do not compress: a few per page, so the tree grows levels as it fills
    work.execute("CREATE TABLE u (k text)")
    work.execute("CREATE INDEX u_k ON u (k)")
    wide = "(SELECT string_agg(md5(g::text || '-' || i::text), '') FROM generate_series(1, 30) i)"
    w, t = measured(mon, lambda: work.execute(f"INSERT INTO u SELECT {wide} FROM generate_series(1, 300) g"))
    splits = [g for g in w.groups if g.rtype.startswith("SPLIT")]
    assert any(not g.leaf for g in splits) and any(g.leaf for g in splits)
    assert t["heap_inserts"] == 300
    assert t["index_tuples"] == 300


def test_updates_hot_when_no_indexed_column_changes_non_hot_with_a_tuple_in_every_index(db):
    mon, work = db
    work.execute("INSERT INTO t SELECT g, g, 'x' FROM generate_series(1, 200) g")

    def updates() -> None:
        work.execute("UPDATE t SET w = 'y' WHERE id <= 30")  # w is in no index: HOT
        work.execute("UPDATE t SET v = v + 1000 WHERE id > 190")  # v is indexed: every index again

    _, t = measured(mon, updates)
    assert t["hot_updates"] == 30
    assert t["non_hot_updates"] == 10
    assert t["updates_to_another_page"] == 0  # fillfactor 50: room on the page
    assert t["row_lock_records"] == 0
    assert t["index_tuples"] == 2 * 10
    assert t["heap_inserts"] == 0
    assert t["commits"] == 2


def test_an_update_that_moves_its_row_to_another_page_logs_a_row_lock_too(db):
    mon, work = db
    work.execute("CREATE TABLE full_pages (id int PRIMARY KEY, w text)")  # fillfactor 100
    work.execute("INSERT INTO full_pages SELECT g, 'x' FROM generate_series(1, 1000) g")
    # the first page is full: the new versions go to another page, whatever column changes
    _, t = measured(mon, lambda: work.execute("UPDATE full_pages SET w = 'yy' WHERE id <= 20"))
    assert t["non_hot_updates"] == 20
    assert t["hot_updates"] == 0
    assert t["updates_to_another_page"] == 20
    assert t["row_lock_records"] == 20  # no FOR UPDATE: each is heap_update's lock of the old tuple
    assert t["index_tuples"] == 20  # the primary key, for each new version


def test_deletes_and_row_locks(db):
    mon, work = db
    work.execute("INSERT INTO t SELECT g, g, 'x' FROM generate_series(1, 100) g")

    def locks_and_deletes() -> None:
        with work.transaction():
            work.execute("SELECT id FROM t WHERE id <= 7 FOR UPDATE").fetchall()
        work.execute("DELETE FROM t WHERE id > 95")

    _, t = measured(mon, locks_and_deletes)
    assert t["row_lock_records"] == 7
    assert t["deletes"] == 5
    assert t["index_tuples"] == 0
    assert t["commits"] == 2


def test_copy_counts_the_tuples_of_a_multi_insert(db):
    mon, work = db

    def copy() -> None:
        with work.cursor().copy("COPY t (id, v, w) FROM STDIN") as cp:
            for i in range(1, 51):
                cp.write_row((i, i, "x"))

    w, t = measured(mon, copy)
    assert any(g.rtype == "MULTI_INSERT" for g in w.groups)
    assert t["heap_inserts"] == 50
    assert t["index_tuples"] == 100


def test_statements_and_transactions_leave_out_the_monitors_own(db):
    mon, work = db

    def statements() -> None:
        for i in range(3):  # 3 autocommit statements: 3 transactions
            work.execute("INSERT INTO t VALUES (%s, %s, 'x')", (i, i))
        mon.conn.execute("SELECT count(*) FROM t")  # the monitor's own poll: counted nowhere
        with work.transaction():  # BEGIN, 2 statements, COMMIT: 1 transaction
            work.execute("UPDATE t SET w = 'z' WHERE id = 0")
            work.execute("SELECT 1")
        with work.transaction() as tx:  # BEGIN, 1 statement, ROLLBACK: 1 transaction, rolled back
            work.execute("SELECT 2")
            raise psycopg.Rollback(tx)
        # publishes this backend's statistics before its reply (PostgreSQL 15: stats flushed, then ReadyForQuery)
        work.execute("SELECT pg_stat_force_next_flush()")

    w, t = measured(mon, statements)
    assert t["statements"] == 3 + (2 + 2) + (1 + 2) + 1
    assert t["tx_control"] == 4
    assert t["transactions"] == 3 + 1 + 1 + 1
    assert w.rollbacks == 1
    assert w.tables["t"] == {"ins": 3, "upd": 1, "hot_upd": 1}
    assert t["commits"] == 4  # write transactions only: the flush's own is read-only


def test_work_in_another_database_of_the_server_is_left_out(db, counted_pg):
    mon, _ = db
    other = f"ws_other_{uuid.uuid4().hex[:8]}"
    counted_pg.create_database(other)
    try:
        with psycopg.connect(counted_pg.conninfo(other), autocommit=True) as elsewhere:
            elsewhere.execute("CREATE TABLE e (id int PRIMARY KEY)")
            w, t = measured(mon, lambda: elsewhere.execute("INSERT INTO e SELECT generate_series(1, 1000)"))
    finally:
        counted_pg.drop_database(other)
    assert t["heap_inserts"] == t["index_tuples"] == 0
    assert w.other_db_wal_bytes > 50_000  # 1,000 heap and 1,000 index records
    # what stays: its commit record (no relation), WAL page headers and the records' alignment
    assert w.wal_bytes < w.other_db_wal_bytes / 10
