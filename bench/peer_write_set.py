"""The pgqueuer peer's drain with its write set: run in the peer's venv (pgqueuer 1.6, asyncpg,
psycopg), not the project's, by :mod:`bench.compare_write_set`.

Usage (``BENCH_DSN`` = an admin DSN of a PostgreSQL that nothing else uses, preloading
``pg_stat_statements``; the peers' folder on ``PYTHONPATH`` with the project's root)::

    BENCH_DSN=postgresql://app@127.0.0.1:PORT/postgres PYTHONPATH=.:../shared/peers \\
        <peer-venv>/bin/python -m bench.peer_write_set --jobs 5000 --workers 2

One run is the peer harness's run (``peer_pgqueuer.py``: a fresh database, PgQueuer's schema, N
no-op jobs enqueued in batches of ``--chunk``, a ``CHECKPOINT``, W worker processes in PgQueuer's
``drain`` mode started together by a barrier) with :class:`bench.write_set.Monitor` marks around the
enqueue and around the drain, as ``bench.drain --write-set`` places them. The schema's install is
outside both windows. Prints one JSON line per run: ``drain_jobs_per_s`` (barrier to the last
worker's exit, as the harness counts it), ``ok`` (every job ran once, none left) and ``write_set``
(:func:`bench.write_set.report`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import time

import asyncpg  # type: ignore[import-not-found]  # the peer venv has it, the project's does not
import peer_pgqueuer as peer  # type: ignore[import-not-found]  # ../shared/peers, on PYTHONPATH
import psycopg
from common import admin_dsn, db_dsn, db_url, recreate_db  # type: ignore[import-not-found]

from bench.write_set import EnqueueAndDrain, Monitor


async def install() -> None:
    """PgQueuer's tables, functions and triggers in the peer's database."""
    driver, _, queries, _ = peer.pgq_modules()
    conn = await asyncpg.connect(db_url(peer.DB))
    await queries(driver(conn)).install()
    await conn.close()


async def enqueue(jobs: int, chunk: int) -> float:
    """``jobs`` no-op jobs, ``chunk`` per ``Queries.enqueue`` call (the harness's batch mode);
    returns the seconds it took."""
    driver, _, queries, _ = peer.pgq_modules()
    conn = await asyncpg.connect(db_url(peer.DB))
    q = queries(driver(conn))
    t0 = time.perf_counter()
    for start in range(0, jobs, chunk):
        n = min(chunk, jobs - start)
        await q.enqueue(["noop"] * n, [None] * n, [0] * n)
    elapsed = time.perf_counter() - t0
    await conn.close()
    return elapsed


def one_run(args: argparse.Namespace, run: int) -> dict:
    """One enqueue and drain of ``args.jobs`` jobs with its write set (module docstring)."""
    recreate_db(peer.DB)
    asyncio.run(install())
    mon = Monitor(db_dsn(peer.DB))
    try:
        marks = EnqueueAndDrain(mon, args.settle)
        marks.before_enqueue()
        enqueue_s = asyncio.run(enqueue(args.jobs, args.chunk))
        marks.after_enqueue()
        ctx = mp.get_context("spawn")
        ready = ctx.Barrier(args.workers + 1)
        out = ctx.Queue()
        procs = [
            ctx.Process(target=peer.worker, args=(args.batch_size, ready, out)) for _ in range(args.workers)
        ]
        for p in procs:
            p.start()
        ready.wait()
        t_go = time.monotonic()
        stats = [out.get(timeout=args.timeout) for _ in procs]
        drain_s = time.monotonic() - t_go
        for p in procs:
            p.join()
        write_set = marks.after_drain(args.jobs, args.verbose)
        executions = sum(s["count"] for s in stats)
        left = mon.execute("SELECT count(*) FROM pgqueuer")[0][0]
        mon.close()
        with psycopg.connect(admin_dsn(), autocommit=True) as admin:  # no autovacuum of it in a later window
            admin.execute(f'DROP DATABASE IF EXISTS "{peer.DB}" WITH (FORCE)')
        return {
            "bench": "peer_pgqueuer",
            "run": run,
            "jobs": args.jobs,
            "workers": args.workers,
            "batch_size": args.batch_size,
            "enqueue_jobs_per_s": round(args.jobs / enqueue_s),
            "drain_jobs_per_s": round(args.jobs / drain_s),
            "ok": executions == args.jobs and left == 0,
            "write_set": write_set,
        }
    finally:
        mon.close()


def main() -> None:
    """Parses the options (``--jobs``, ``--workers``, ``--batch-size``, ``--chunk``, ``--runs``,
    ``--settle``, ``--verbose``, ``--timeout``) and prints one JSON line per run."""
    ap = argparse.ArgumentParser(prog="python -m bench.peer_write_set", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--batch-size", type=int, default=10, help="PgQueuer dequeue batch size (its default: 10)"
    )
    ap.add_argument("--chunk", type=int, default=1000, help="jobs per enqueue call (the harness's default)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--settle", type=float, default=11.0, help="Seconds for the statistics to flush.")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    for run in range(1, args.runs + 1):
        print(json.dumps(one_run(args, run)), flush=True)


if __name__ == "__main__":
    main()
