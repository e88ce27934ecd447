"""Write set of a window of database work, from PostgreSQL's own counters (no timing involved).

Used by ``python -m bench.drain --write-set`` and ``python -m bench.compare_write_set``; needs only
psycopg and the standard library, so the pgqueuer peer's venv imports it too.

What a window is: a :class:`Mark` before and one after the work. Between them this module reads

* **the WAL itself**, with ``pg_walinspect`` (PostgreSQL 15 contrib): every record between the two
  LSNs, grouped by resource manager, record type and the relation of its first block reference.
  From it come WAL bytes (LSN difference, so page headers and padding included), WAL records, the
  bytes of full-page images, heap inserts / non-HOT updates (and how many moved the row to another
  page) / HOT updates / deletes / row locks (``Heap/LOCK`` and ``Heap2/LOCK_UPDATED``: ``FOR UPDATE``,
  ``FOR KEY SHARE`` of foreign-key checks, and the lock ``heap_update`` logs on the old version of a
  row it moves to another page) and index tuples inserted (``Btree/INSERT_LEAF`` + ``INSERT_POST`` +
  leaf-level ``SPLIT_L``/``SPLIT_R``, whose record carries the new tuple; ``Hash/INSERT``). These
  figures are exact: WAL is written synchronously by the backend that does the change. Commit
  records give the writing transactions. Records of other databases of the server are left out.
* **pg_stat_statements** (when the server preloads it): statement executions in the database,
  per statement text, recorded at each execution's end (exact). The monitor's own statements are
  not recorded (``SET pg_stat_statements.track = 'none'`` on its connection).
* **the cumulative statistics** ``pg_stat_database`` (all transactions, read-only ones included)
  and ``pg_stat_user_tables`` (a cross-check of the heap figures, per table). PostgreSQL 15 backends
  flush these at most once a second and an idle backend up to 10 s later (``PGSTAT_IDLE_INTERVAL``
  in ``pgstat.c``), so marks wait ``settle_s`` (default 11 s) around their reads; what the system
  does while settling is estimated from its idle rate and subtracted, and the monitor's own
  transactions are counted and subtracted.

The arithmetic (groups and deltas -> per-job figures) is :mod:`bench.write_set_figures`.
WAL is cluster-wide: run the work on a server nothing else uses (the benchmarks start their own).
Errors: :class:`WriteSetUnavailable` if ``pg_walinspect`` cannot be created (not superuser, no
contrib package).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.write_set_figures import WalGroup, Window, diff_counts, report

#: Every WAL record in [start, end), grouped. ``rel`` = the first block reference's relation, named
#: when it lives in this database (``pg_filenode_relation``), else ``other db`` / ``none``.
WAL_GROUPS_SQL = """
WITH r AS (
  SELECT resource_manager AS rmgr, replace(record_type, '+INIT', '') AS rtype,
         record_length - fpi_length AS rec, fpi_length AS fpi, description AS d, block_ref AS br,
         regexp_match(block_ref, 'rel (\\d+)/(\\d+)/(\\d+)') AS b
  FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
)
SELECT rmgr, rtype,
       CASE WHEN b IS NULL THEN 'none'
            WHEN b[2]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())
              THEN coalesce(pg_filenode_relation(CASE WHEN b[1] = '1663' THEN 0 ELSE b[1]::oid END,
                                                 b[3]::oid)::regclass::text, 'filenode ' || b[3])
            WHEN b[2] = '0' THEN 'shared catalog'
            ELSE 'other db' END AS rel,
       coalesce(d ~ '^level 0,', false) AS leaf,
       count(*)::bigint,
       sum(rec)::bigint,
       sum(fpi)::bigint,
       sum(CASE WHEN rtype = 'MULTI_INSERT' THEN (regexp_match(d, '^(\\d+) tuples'))[1]::bigint
                ELSE 1 END)::bigint,
       coalesce(rmgr = 'Heap' AND rtype = 'UPDATE' AND br ~ 'blkref #1:', false) AS other_page
FROM r GROUP BY 1, 2, 3, 4, 9
"""


class WriteSetUnavailable(RuntimeError):
    """The server cannot show its WAL (``CREATE EXTENSION pg_walinspect`` failed)."""


@dataclass
class Mark:
    """Counters at one instant: ``lsn`` (flushed WAL position), ``statements`` (pg_stat_statements
    calls per query text in this database, ``None`` without the extension), ``xacts``
    (``xact_commit + xact_rollback`` of this database; ``rollbacks``: the second term), ``own_xacts`` (the monitor's transactions so
    far), ``tables`` (relname -> ``pg_stat_user_tables`` counters); ``lsn_at`` and ``stats_at``: when
    the LSN and the statistics were read (``time.monotonic()``, s)."""

    lsn: str
    statements: dict[str, int] | None
    xacts: int = 0
    own_xacts: int = 0
    rollbacks: int = 0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    lsn_at: float = 0.0
    stats_at: float = 0.0


class CountingConnection(psycopg.Connection[Any]):
    """An autocommit psycopg connection that counts its ``execute`` calls (:attr:`executed`): each
    is one transaction, which the transactions figure subtracts. A benchmark polls through it."""

    executed = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """``psycopg.Connection.execute``, counted."""
        self.executed += 1
        return super().execute(*args, **kwargs)


class Monitor:
    """A superuser connection to the database under test that reads the counters.

    ``conninfo``: libpq URI of that database. :meth:`__init__` creates ``pg_walinspect`` (and
    ``pg_stat_statements`` when the server preloads it) in it; raises :class:`WriteSetUnavailable`
    when ``pg_walinspect`` cannot be created. :attr:`conn` (a :class:`CountingConnection`) may also
    be used by the caller between the marks (e.g. to poll for the end of the work): its statements
    are neither in the statement figures nor in the transactions.
    """

    def __init__(self, conninfo: str) -> None:
        self.conn = CountingConnection.connect(conninfo, autocommit=True)
        self.idle_xacts_per_s = 0.0
        try:
            self.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error as e:
            self.conn.close()
            raise WriteSetUnavailable(f"pg_walinspect: {e}") from e
        preload = self.execute("SHOW shared_preload_libraries")[0][0] or ""
        self.has_statements = "pg_stat_statements" in preload
        if self.has_statements:
            self.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.execute("SET pg_stat_statements.track = 'none'")

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Runs one statement (its own transaction) and returns its rows (``[]`` if none)."""
        cur = self.conn.execute(sql, params)
        return cur.fetchall() if cur.description else []

    @property
    def own_xacts(self) -> int:
        """Transactions run on :attr:`conn` so far."""
        return self.conn.executed

    def close(self) -> None:
        """Closes the connection."""
        self.conn.close()

    def checkpoint(self) -> None:
        """``CHECKPOINT``: every page's first change after it writes a full-page image, on both
        sides of a comparison alike (the pgqueuer harness checkpoints after its enqueue too)."""
        self.execute("CHECKPOINT")

    def lsn(self) -> str:
        """The flushed WAL position (``pg_current_wal_flush_lsn()``), as text."""
        return str(self.execute("SELECT pg_current_wal_flush_lsn()")[0][0])

    def statements(self) -> dict[str, int] | None:
        """pg_stat_statements calls per query text in this database (``None`` without it)."""
        if not self.has_statements:
            return None
        rows = self.execute(
            "SELECT query, sum(calls)::bigint FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY query"
        )
        return {q: int(n) for q, n in rows}

    def mark(self, settle_before: float = 0.0, settle_after: float = 0.0) -> Mark:
        """A :class:`Mark`. The LSN and the statements are read after ``settle_before`` s; the
        transaction and table counters ``settle_after`` s later. PostgreSQL 15 backends publish
        those statistics up to ~10 s late (module docstring), so a window's first mark settles
        before (the earlier work's counts are in before it reads), its last mark after."""
        time.sleep(settle_before)
        m = Mark(lsn=self.lsn(), statements=self.statements(), lsn_at=time.monotonic())
        time.sleep(settle_after)
        self._read_stats(m)
        return m

    def idle_rate(self, seconds: float = 5.0) -> float:
        """Measures the other sessions' transactions per second while the system idles for
        ``seconds`` (call it after the statistics settled, before the work), keeps it as
        :attr:`idle_xacts_per_s` (used by :meth:`window`) and returns it."""
        a, b = Mark("", None), Mark("", None)
        self._read_stats(a)
        time.sleep(seconds)
        self._read_stats(b)
        self.idle_xacts_per_s = ((b.xacts - a.xacts) - (b.own_xacts - a.own_xacts)) / (
            b.stats_at - a.stats_at
        )
        return self.idle_xacts_per_s

    def _read_stats(self, m: Mark) -> None:
        """Flushes this backend's own statistics, then fills ``m.xacts``, ``m.own_xacts``, ``m.tables``."""
        self.execute("SELECT pg_stat_force_next_flush()")
        m.own_xacts = self.own_xacts  # this read's own transaction is counted after it
        m.stats_at = time.monotonic()
        m.xacts, m.rollbacks = map(
            int,
            self.execute(
                "SELECT xact_commit + xact_rollback, xact_rollback FROM pg_stat_database "
                "WHERE datname = current_database()"
            )[0],
        )
        rows = self.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables"
        )
        m.tables = {
            r[0]: dict(zip(("ins", "upd", "hot_upd", "del"), map(int, r[1:]), strict=True)) for r in rows
        }

    def wal_groups(self, start: str, end: str) -> list[WalGroup]:
        """Every WAL record in [``start``, ``end``) as :class:`WalGroup` rows."""
        rows = self.execute(WAL_GROUPS_SQL, {"start": start, "end": end})
        return [
            WalGroup(r[0], r[1], r[2], bool(r[3]), int(r[4]), int(r[5]), int(r[6]), int(r[7]), bool(r[8]))
            for r in rows
        ]

    def window(self, start: Mark, end: Mark) -> Window:
        """The :class:`Window` from ``start`` to ``end``."""
        wal_bytes = int(self.execute("SELECT %s::pg_lsn - %s::pg_lsn", (end.lsn, start.lsn))[0][0])
        st = None
        if start.statements is not None and end.statements is not None:
            st = diff_counts(end.statements, start.statements)
        xacts = (end.xacts - start.xacts) - (end.own_xacts - start.own_xacts)
        tables = {rel: diff_counts(c, start.tables.get(rel, {})) for rel, c in end.tables.items()}
        outside = (end.stats_at - end.lsn_at) - (start.stats_at - start.lsn_at)
        groups = self.wal_groups(start.lsn, end.lsn)
        others = sum(g.record_bytes + g.fpi_bytes for g in groups if g.rel == "other db")
        return Window(
            [g for g in groups if g.rel != "other db"],
            wal_bytes - others,
            st,
            xacts,
            {k: v for k, v in tables.items() if v},
            self.idle_xacts_per_s * max(0.0, outside),
            end.rollbacks - start.rollbacks,
            others,
        )


class EnqueueAndDrain:
    """The marks of a benchmark that enqueues jobs and then drains them, placed alike for every
    system measured (``bench.drain --write-set``, the pgqueuer peer's run).

    ``monitor``: the :class:`Monitor` of the database under test; ``settle_s``: seconds for the
    statistics to be published around the marks. Call :meth:`before_enqueue`, :meth:`after_enqueue`
    (before the drain may start: it checkpoints) and :meth:`after_drain`, in that order.
    """

    def __init__(self, monitor: Monitor, settle_s: float = 11.0) -> None:
        self.monitor = monitor
        self.settle_s = settle_s

    def before_enqueue(self) -> None:
        """Waits for the statistics to settle, measures the idle rate (5 s), then marks."""
        time.sleep(self.settle_s)
        self.monitor.idle_rate()
        self._m0 = self.monitor.mark()

    def after_enqueue(self) -> None:
        """Marks the enqueue's end, reads its window (before the ``CHECKPOINT``, which may recycle its
        WAL), checkpoints and marks the drain's start."""
        self._enqueue = self.monitor.window(self._m0, self.monitor.mark(settle_after=self.settle_s))
        self.monitor.checkpoint()
        self._m2 = self.monitor.mark()

    def after_drain(self, jobs: int, verbose: bool = False) -> dict[str, Any]:
        """Marks the drain's end; returns :func:`report` of ``enqueue`` and ``drain`` for ``jobs``
        jobs, plus ``idle_transactions_per_s``."""
        drain = self.monitor.window(self._m2, self.monitor.mark(settle_after=self.settle_s))
        out = report({"enqueue": self._enqueue, "drain": drain}, jobs, verbose)
        out["idle_transactions_per_s"] = round(self.monitor.idle_xacts_per_s, 1)
        return out
