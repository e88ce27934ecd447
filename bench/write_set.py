"""Write set of a window of database work, from PostgreSQL's own counters (no timing involved).

Used by ``python -m bench.drain --write-set`` and ``python -m bench.compare_write_set``; needs only
psycopg and the standard library, so the pgqueuer peer's venv imports it too.

What a window is: a :class:`Mark` before and one after the work. Between them this module reads

* **the WAL itself**, with ``pg_walinspect`` (PostgreSQL 15 contrib): every record between the two
  LSNs, grouped by resource manager, record type and the relation of its first block reference.
  From it come WAL bytes (LSN difference, so page headers and padding included), WAL records, the
  bytes of full-page images, heap inserts / non-HOT updates / HOT updates / deletes / row locks
  (``Heap/LOCK`` and ``Heap2/LOCK_UPDATED``: ``FOR UPDATE``, ``FOR KEY SHARE`` of foreign-key checks)
  and index tuples inserted (``Btree/INSERT_LEAF`` + ``INSERT_POST`` + leaf-level ``SPLIT_L``/``SPLIT_R``,
  whose record carries the new tuple; ``Hash/INSERT``). These figures are exact: WAL is written
  synchronously by the backend that does the change. Commit records give the writing transactions.
* **pg_stat_statements** (when the server preloads it): statement executions in the database,
  per statement text, recorded at each execution's end (exact). The monitor's own statements are
  not recorded (``SET pg_stat_statements.track = 'none'`` on its connection).
* **the cumulative statistics** ``pg_stat_database`` (all transactions, read-only ones included)
  and ``pg_stat_user_tables`` (a cross-check of the heap figures, per table). PostgreSQL 15 backends
  flush these at most once a second and an idle backend up to 10 s later (``PGSTAT_IDLE_INTERVAL``
  in ``pgstat.c``), so a mark waits ``settle_s`` (default 11 s) before reading them, and the
  transactions figure includes what the system did while settling; the monitor's own transactions
  are counted and subtracted.

WAL is cluster-wide: run the work on a server nothing else uses (the benchmarks start their own).
Errors: :class:`WriteSetUnavailable` if ``pg_walinspect`` cannot be created (not superuser, no
contrib package).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

#: Heap record types (``+INIT`` stripped) -> figure name; ``MULTI_INSERT`` counts its tuples.
HEAP_FIGURES = {
    ("Heap", "INSERT"): "heap_inserts",
    ("Heap2", "MULTI_INSERT"): "heap_inserts",
    ("Heap", "UPDATE"): "non_hot_updates",
    ("Heap", "HOT_UPDATE"): "hot_updates",
    ("Heap", "DELETE"): "deletes",
    ("Heap", "LOCK"): "row_lock_records",
    ("Heap2", "LOCK_UPDATED"): "row_lock_records",
}
#: Index record types that add one index tuple each (a leaf split only at level 0).
INDEX_INSERTS = {("Btree", "INSERT_LEAF"), ("Btree", "INSERT_POST"), ("Hash", "INSERT")}
LEAF_SPLITS = {("Btree", "SPLIT_L"), ("Btree", "SPLIT_R")}
#: Statements that only delimit transactions (counted apart from the others).
TX_CONTROL = re.compile(r"^\s*(BEGIN|START TRANSACTION|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I)

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


@dataclass(frozen=True)
class WalGroup:
    """WAL records of one (resource manager, record type, relation, leaf split?, update to another
    page?) group: ``count`` records, ``record_bytes`` without full-page images, ``fpi_bytes`` of them,
    ``tuples`` (= count, except ``MULTI_INSERT``: the tuples it inserts). ``other_page``: a non-HOT
    update whose new tuple went to another page (its record references two blocks); before letting
    go of the old page ``heap_update`` WAL-logs a row lock of the old tuple, one more record."""

    rmgr: str
    rtype: str
    rel: str
    leaf: bool
    count: int
    record_bytes: int
    fpi_bytes: int
    tuples: int
    other_page: bool = False


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


@dataclass
class Window:
    """What happened between two marks: the WAL ``groups`` of this database (and of no relation, e.g.
    commit records, or of a shared catalog), ``wal_bytes`` (LSN difference minus the records of other
    databases, ``other_db_wal_bytes``: an autovacuum elsewhere on the server),
    ``statements`` (calls per query text; ``None`` without pg_stat_statements), ``xacts`` (other
    sessions' transactions between the statistics reads), ``settle_xacts`` (of those, the estimate of
    what the system did while the statistics settled: its idle rate times the seconds the statistics
    reads lie outside the LSN reads), ``tables`` (per-table statistics deltas) and ``rollbacks``
    (rolled-back transactions, in ``xacts`` too). ``a + b`` adds two windows (e.g. the enqueue and the drain of the same jobs)."""

    groups: list[WalGroup]
    wal_bytes: int
    statements: dict[str, int] | None
    xacts: int
    tables: dict[str, dict[str, int]]
    settle_xacts: float = 0.0
    rollbacks: int = 0
    other_db_wal_bytes: int = 0

    def __add__(self, other: Window) -> Window:
        st = None
        if self.statements is not None and other.statements is not None:
            st = _add_counts(self.statements, other.statements)
        tables = {
            rel: _add_counts(self.tables.get(rel, {}), other.tables.get(rel, {}))
            for rel in self.tables.keys() | other.tables.keys()
        }
        return Window(
            self.groups + other.groups,
            self.wal_bytes + other.wal_bytes,
            st,
            self.xacts + other.xacts,
            tables,
            self.settle_xacts + other.settle_xacts,
            self.rollbacks + other.rollbacks,
            self.other_db_wal_bytes + other.other_db_wal_bytes,
        )


def _add_counts(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _diff_counts(end: dict[str, int], start: dict[str, int]) -> dict[str, int]:
    """Positive differences ``end - start`` per key (keys whose counter did not move are left out)."""
    return {k: v - start.get(k, 0) for k, v in end.items() if v - start.get(k, 0) > 0}


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
            st = _diff_counts(end.statements, start.statements)
        xacts = (end.xacts - start.xacts) - (end.own_xacts - start.own_xacts)
        tables = {rel: _diff_counts(c, start.tables.get(rel, {})) for rel, c in end.tables.items()}
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


def tally(groups: list[WalGroup]) -> dict[str, int]:
    """Totals of WAL groups: ``wal_records``, ``wal_record_bytes`` (without full-page images),
    ``wal_fpi_bytes``, the heap figures of :data:`HEAP_FIGURES`, ``updates_to_another_page`` (of the
    non-HOT updates), ``index_tuples``, ``commits`` and ``aborts`` (``Transaction`` records)."""
    out = dict.fromkeys(
        ("wal_records", "wal_record_bytes", "wal_fpi_bytes", "index_tuples", "commits", "aborts"), 0
    )
    out["updates_to_another_page"] = 0
    out.update(dict.fromkeys(HEAP_FIGURES.values(), 0))
    for g in groups:
        out["wal_records"] += g.count
        out["wal_record_bytes"] += g.record_bytes
        out["wal_fpi_bytes"] += g.fpi_bytes
        key = (g.rmgr, g.rtype)
        if key in HEAP_FIGURES:
            out[HEAP_FIGURES[key]] += g.tuples
            out["updates_to_another_page"] += g.count if g.other_page else 0
        elif key in INDEX_INSERTS or (key in LEAF_SPLITS and g.leaf):
            out["index_tuples"] += g.count
        elif g.rmgr == "Transaction" and g.rtype.startswith("COMMIT"):
            out["commits"] += g.count
        elif g.rmgr == "Transaction" and g.rtype.startswith("ABORT"):
            out["aborts"] += g.count
    return out


def statement_calls(diff: dict[str, int]) -> dict[str, Any]:
    """Statement executions of a window (query text -> calls): ``statements`` (all), ``tx_control``
    (BEGIN/COMMIT/ROLLBACK/SAVEPOINT/RELEASE) and ``top`` (the 20 most executed other statements,
    text shortened to 120 characters -> calls)."""
    ctl = sum(n for q, n in diff.items() if TX_CONTROL.match(q))
    others = sorted(((n, q) for q, n in diff.items() if not TX_CONTROL.match(q)), reverse=True)
    return {
        "statements": sum(diff.values()),
        "tx_control": ctl,
        "top": {" ".join(q.split())[:120]: n for n, q in others[:20]},
    }


def _per(n: float, jobs: int, digits: int = 2) -> float:
    return round(n / jobs, digits) if jobs else float("nan")


def figures(w: Window, jobs: int, verbose: bool = False) -> dict[str, Any]:
    """Per-job write-set figures of window ``w`` (and its totals under ``"totals"``).

    Keys per job: ``wal_bytes`` (LSN difference), ``wal_bytes_without_fpi`` (minus full-page images),
    ``wal_records``, ``non_hot_updates`` (``updates_to_another_page`` of them), ``hot_updates``, ``heap_inserts``, ``deletes``,
    ``index_tuples``, ``row_lock_records``, ``write_transactions`` (commit and abort records),
    ``statements`` and ``statements_without_tx_control`` (pg_stat_statements; ``None`` without it),
    ``transactions`` (``pg_stat_database``: read-only ones included, the monitor's own and the
    settling time's estimate (:attr:`Window.settle_xacts`) subtracted), ``transactions_raw`` (nothing
    of the settling subtracted), ``transactions_rolled_back`` (``xact_rollback``: a client's
    ROLLBACK, a failed statement, or a session that closed inside a transaction). With ``verbose``: ``by_relation`` (per table and
    index: records, bytes, heap and index figures), ``by_record_type``, ``top_statements`` and
    ``pg_stat_user_tables`` (per table: the statistics' own insert / update / HOT / delete deltas).
    """
    t = tally(w.groups)
    st = statement_calls(w.statements) if w.statements is not None else None
    out: dict[str, Any] = {
        "wal_bytes": _per(w.wal_bytes, jobs, 0),
        "wal_bytes_without_fpi": _per(w.wal_bytes - t["wal_fpi_bytes"], jobs, 0),
        "wal_records": _per(t["wal_records"], jobs, 1),
        "non_hot_updates": _per(t["non_hot_updates"], jobs),
        "updates_to_another_page": _per(t["updates_to_another_page"], jobs),
        "hot_updates": _per(t["hot_updates"], jobs),
        "heap_inserts": _per(t["heap_inserts"], jobs),
        "deletes": _per(t["deletes"], jobs),
        "index_tuples": _per(t["index_tuples"], jobs),
        "row_lock_records": _per(t["row_lock_records"], jobs),
        "write_transactions": _per(t["commits"] + t["aborts"], jobs, 3),
        "statements": _per(st["statements"], jobs, 3) if st else None,
        "statements_without_tx_control": _per(st["statements"] - st["tx_control"], jobs, 3) if st else None,
        "transactions": _per(w.xacts - w.settle_xacts, jobs, 3),
        "transactions_raw": _per(w.xacts, jobs, 3),
        "transactions_rolled_back": _per(w.rollbacks, jobs, 3),
        "totals": {"jobs": jobs, "wal_bytes": w.wal_bytes, **t, "transactions": w.xacts}
        | {"settle_transactions": round(w.settle_xacts, 1), "other_db_wal_bytes": w.other_db_wal_bytes}
        | ({"statements": st["statements"], "tx_control": st["tx_control"]} if st else {}),
    }
    if verbose:
        out["by_relation"] = by_relation(w.groups, jobs)
        out["by_record_type"] = by_record_type(w.groups, jobs)
        out["top_statements"] = st["top"] if st else None
        out["pg_stat_user_tables"] = dict(sorted(w.tables.items()))
    return out


def report(windows: dict[str, Window], jobs: int, verbose: bool = False) -> dict[str, Any]:
    """``{"job": ..., <name>: ...}``: :func:`figures` of the sum of ``windows`` (the whole path of a
    job, e.g. ``enqueue`` + ``drain``) under ``"job"``, then of each window under its name."""
    names = list(windows)
    total = windows[names[0]]
    for n in names[1:]:
        total = total + windows[n]
    out = {"job": figures(total, jobs, verbose)} if len(names) > 1 else {}
    return out | {n: figures(w, jobs, verbose) for n, w in windows.items()}


def by_relation(groups: list[WalGroup], jobs: int) -> dict[str, dict[str, float]]:
    """Per relation (table, index, ``none`` for records without a block), per job: ``wal_bytes``
    (records and images), ``records``, and the non-zero heap / index figures of :func:`tally`."""
    rels: dict[str, list[WalGroup]] = {}
    for g in groups:
        rels.setdefault(g.rel, []).append(g)
    out = {}
    for rel, gs in rels.items():
        t = tally(gs)
        row = {
            "wal_bytes": _per(t["wal_record_bytes"] + t["wal_fpi_bytes"], jobs, 1),
            "records": _per(t["wal_records"], jobs),
        }
        for k in (*dict.fromkeys(HEAP_FIGURES.values()), "updates_to_another_page", "index_tuples"):
            if t[k]:
                row[k] = _per(t[k], jobs)
        out[rel] = row
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["wal_bytes"]))


def by_record_type(groups: list[WalGroup], jobs: int) -> dict[str, dict[str, float]]:
    """Per ``rmgr/type``, per job: ``records``, ``bytes`` (without images), ``fpi_bytes``; largest first."""
    acc: dict[str, list[int]] = {}
    for g in groups:
        a = acc.setdefault(f"{g.rmgr}/{g.rtype}", [0, 0, 0])
        a[0] += g.count
        a[1] += g.record_bytes
        a[2] += g.fpi_bytes
    rows = {
        k: {"records": _per(a[0], jobs), "bytes": _per(a[1], jobs, 1), "fpi_bytes": _per(a[2], jobs, 1)}
        for k, a in acc.items()
    }
    return dict(sorted(rows.items(), key=lambda kv: -(kv[1]["bytes"] + kv[1]["fpi_bytes"])))
