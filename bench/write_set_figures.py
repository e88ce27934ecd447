"""The arithmetic of a write set: WAL record groups and statistics deltas -> per-job figures.

Pure functions and data, no database: :mod:`bench.write_set` reads the counters and builds the
:class:`Window` objects; the tests of this arithmetic need no server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

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


def diff_counts(end: dict[str, int], start: dict[str, int]) -> dict[str, int]:
    """Positive differences ``end - start`` per key (keys whose counter did not move are left out)."""
    return {k: v - start.get(k, 0) for k, v in end.items() if v - start.get(k, 0) > 0}


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
