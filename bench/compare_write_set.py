"""Write set per job of Gnomon's drain beside pgqueuer 1.6's, from the database's own counters.

Usage, from the project's root (``scripts/bootstrap`` done)::

    .venv/bin/python -m bench.compare_write_set [--runs 3] [--jobs 5000] [--peers ../shared/peers] [--verbose]

The write-set companion of ``../shared/peers/compare.sh`` (which times the drains): one durable
PostgreSQL of its own (fsync and synchronous_commit on, ``pg_stat_statements`` preloaded,
``wal_keep_size`` so that no WAL of a window is recycled), then ``--runs`` interleaved pairs, the
peer first as in ``compare.sh``:

* pgqueuer: :mod:`bench.peer_write_set` in the peer's venv (``$COMPARE_HOME/peer-venv`` when it
  exists, as ``compare.sh`` makes it, else one made here with the same pins), on the database the
  peers' harness recreates each run;
* Gnomon: ``python -m bench.drain --write-set --single-jobs 0 --lag-seconds 0`` on a fresh database
  (the phases outside the measured windows are skipped; they do not change the figures), run by
  ``--python`` from this checkout's root: ``bench`` comes from here, ``gnomon`` (services, schema,
  migrations) from that interpreter's editable installs, so ``--python ../wt-x/.venv/bin/python``
  measures another worktree's code.

Both place their marks alike (:mod:`bench.write_set`): around the enqueue, then a ``CHECKPOINT``,
then around the drain. Prints each run's JSON line (``"side"``: ``gnomon`` / ``pgqueuer``), then per
window (``job`` = enqueue + drain, ``enqueue``, ``drain``) a table of the medians per job, each
side's min-max across runs and the ratio gnomon/pgqueuer. The drain rates printed with them come
from runs that also wait for the statistics; time the drains with ``compare.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

from gnomon.common.config import DevServerSettings
from gnomon.devservers import PostgresServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: pgqueuer's venv, as ``compare.sh`` installs it.
PEER_PINS = ("psycopg[binary]==3.3.9", "asyncpg==0.32.0", "pgqueuer==1.6.0")
#: Figures of the summary table, in order.
FIGURES = (
    "wal_bytes",
    "wal_bytes_without_fpi",
    "wal_records",
    "non_hot_updates",
    "updates_to_another_page",
    "hot_updates",
    "heap_inserts",
    "deletes",
    "index_tuples",
    "row_lock_records",
    "write_transactions",
    "statements",
    "statements_without_tx_control",
    "transactions",
    "transactions_raw",
    "transactions_rolled_back",
)


def peer_python(home: str) -> str:
    """The peer venv's interpreter under ``home`` (created with :data:`PEER_PINS` if missing)."""
    venv = os.path.join(home, "peer-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        os.makedirs(home, exist_ok=True)
        subprocess.run(["python3", "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", *PEER_PINS], check=True)
    return py


def last_json(out: str, what: str) -> dict:
    """The last JSON object line of a process's output; raises ``SystemExit`` naming ``what``."""
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{what} printed no result line")
    return json.loads(lines[-1])


def run_peer(py: str, args: argparse.Namespace, admin: str) -> dict:
    """One pgqueuer run of :mod:`bench.peer_write_set`; its JSON line."""
    env = dict(os.environ, BENCH_DSN=admin, PYTHONPATH=os.pathsep.join((ROOT, os.path.abspath(args.peers))))
    cmd = [py, "-m", "bench.peer_write_set", "--jobs", str(args.jobs), "--workers", str(args.workers)]
    cmd += ["--settle", str(args.settle)] + (["--verbose"] if args.verbose else [])
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode:
        raise SystemExit(f"pgqueuer run failed ({p.returncode}): {p.stderr[-2000:]}")
    return last_json(p.stdout, "pgqueuer run")


def run_gnomon(args: argparse.Namespace, pg: PostgresServer) -> dict:
    """One ``bench.drain --write-set`` run on a fresh database of ``pg``; its JSON line."""
    db = f"ws_{uuid.uuid4().hex[:8]}"
    url = pg.create_database(db)
    cmd = [args.python, "-m", "bench.drain", "--jobs", str(args.jobs), "--workers", str(args.workers)]
    cmd += ["--runs", "1", "--single-jobs", "0", "--lag-seconds", "0", "--write-set", "--dsn", url]
    cmd += ["--write-set-settle", str(args.settle)] + (["--verbose"] if args.verbose else [])
    env = {k: v for k, v in os.environ.items() if k != "GNOMON_PYTHON"}  # Gnomon refuses unknown GNOMON_*
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    finally:
        pg.drop_database(db)
    if p.returncode:
        raise SystemExit(f"gnomon run failed ({p.returncode}): {p.stderr[-2000:]}")
    return last_json(p.stdout, "gnomon run")


def summary(results: dict[str, list[dict]], window: str) -> list[str]:
    """A Markdown table of ``window``'s figures: median per job (min-max) per side, and the ratio."""
    rows = [
        f"{window} (per job) | gnomon | pgqueuer | gnomon/pgqueuer",
        "--- | --- | --- | ---",
    ]
    for fig in FIGURES:
        cells: list[str] = []
        meds: list[float | None] = []
        for side in ("gnomon", "pgqueuer"):
            vals = [r["write_set"][window][fig] for r in results[side] if r.get("write_set")]
            vals = [v for v in vals if v is not None]
            if not vals:
                cells.append("-")
                meds.append(None)
                continue
            med = statistics.median(vals)
            meds.append(med)
            spread = f" ({min(vals):g}-{max(vals):g})" if len(vals) > 1 and min(vals) != max(vals) else ""
            cells.append(f"{med:g}{spread}")
        ratio = f"{meds[0] / meds[1]:.2f}" if meds[0] is not None and meds[1] else "-"
        rows.append(f"{fig} | {cells[0]} | {cells[1]} | {ratio}")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Runs the comparison (module docstring); returns 0, or raises ``SystemExit`` when a run fails."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.compare_write_set", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--peers", default=os.path.join(ROOT, "..", "shared", "peers"), help="peer_pgqueuer.py's folder"
    )
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="Interpreter of the Gnomon side (default: this one). Another worktree's .venv/bin/python "
        "measures that worktree's code (its services, schema and migrations) with this checkout's bench.",
    )
    ap.add_argument("--settle", type=float, default=11.0, help="Seconds for the statistics to flush.")
    ap.add_argument("--verbose", action="store_true", help="Per table, index, record type and statement.")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.peers, "peer_pgqueuer.py")):
        raise SystemExit(f"no peer_pgqueuer.py in {args.peers} (--peers)")
    home = os.environ.get("COMPARE_HOME") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "gnomon-compare")
    if not os.path.exists(os.path.join(home, "peer-venv", "bin", "python")):
        home = os.path.join(os.environ.get("TMPDIR", "/tmp"), "gnomon-compare-write-set")
    py = peer_python(home)
    settings: dict[str, object] = {"shared_preload_libraries": "pg_stat_statements", "wal_keep_size": "2GB"}
    results: dict[str, list[dict]] = {"gnomon": [], "pgqueuer": []}
    with PostgresServer(durable=True, settings=settings, **DevServerSettings().model_dump()) as pg:
        for run in range(1, args.runs + 1):
            for side in ("pgqueuer", "gnomon"):
                r = run_peer(py, args, pg.conninfo()) if side == "pgqueuer" else run_gnomon(args, pg)
                r |= {"side": side, "run": run}
                results[side].append(r)
                print(json.dumps(r), flush=True)
    for window in ("job", "enqueue", "drain"):
        print("\n" + "\n".join(summary(results, window)), flush=True)
    ok = all(r.get("ok") for rs in results.values() for r in rs)
    print(f"\n{args.runs} run(s) of {args.jobs} jobs each side; ok={ok}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
