"""Drain benchmark: N no-op jobs due now, W worker processes, figures as JSON lines.

Usage: ``python -m bench.drain --jobs 20000 --workers 2 [--runs 1] [--dsn URL] [--concurrency 64]
[--insecure | --compare-auth] [--workers-lang python|ts|both]``

``--workers-lang`` chooses the SDK of the W worker processes: ``python`` (``gnomon worker``, the default),
``ts`` (``node libs/sdk-ts/dist/examples/noop-worker.js``, the TypeScript SDK; build it first with
``scripts/bootstrap``) or ``both`` (each run twice on the same PostgreSQL server, Python first, then
TypeScript; every figure line carries ``workers_lang``).

Per run (a fresh database each run; the embedded PostgreSQL is started **durable**: fsync and
synchronous_commit on, unless ``--dsn`` points elsewhere):

1. the suite starts (api, dispatcher, planner, reaper processes; etcd);
2. enqueue, with no worker connected: ``--single-jobs`` CreateJob calls (``--enqueue-concurrency``
   in flight, on a queue nobody drains) -> ``enqueue_single_jobs_per_s``;
3. drain, with a start signal like the peer's (``peers/peer_pgqueuer.py`` starts its clock once every
   worker process is connected): W worker processes start (``gnomon worker``, or the TypeScript
   no-op worker) and the bench waits until each has logged its connection to every dispatcher
   (``worker_start_s``); only then are the ``--jobs`` drain jobs created through BatchCreateJobs
   (``--batch-size`` each) -> ``enqueue_jobs_per_s``, all with ``schedule_time`` = T, the start
   signal, ``--gate-lead`` s (database clock) after the enqueue began (default 2 s + 1 s per 4,000
   jobs). The drain window runs from T to the last ``finished_at`` (database clock) ->
   ``drain_jobs_per_s``; CPU per job (``drain_cpu_us_per_job``) is counted from T too, so neither
   includes the workers' start-up. ``gate_missed`` = the enqueue ended after T: the window then
   includes part of it (a slower figure, never a faster one) and ``drain_cpu_us_per_job`` is null;
4. steady lag: with the workers connected, jobs are created at ``--rate`` per second (default 200) for
   ``--lag-seconds`` s, due now, then the same due ``--later`` s later -> dispatch lag
   (``dispatched_at - scheduled_at``) p50/p99 for each (``dispatch_lag_*`` = due now);
5. ``peak_rss_mb`` = VmHWM of the api and dispatcher processes; ``ok`` = every job SUCCEEDED with
   exactly one attempt (one execution: a worker starts a handler only after its accept is acked).

``--write-set`` adds ``write_set``: the drain's WAL bytes, WAL records, non-HOT/HOT updates, index
tuples, row-lock records, statements and transactions per job, from the database's own counters
(:mod:`bench.write_set`): ``enqueue`` (the BatchCreateJobs calls), ``drain`` (from a ``CHECKPOINT``
after the enqueue to the last job's end) and ``job`` (both); ``--write-set-settle`` s are waited
around the marks for the statistics to be published. ``--verbose`` adds the per-table, per-index,
per-record-type and per-statement breakdown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from datetime import datetime

import psutil
import psycopg

from bench.write_set import EnqueueAndDrain, Monitor
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon.cli.suite import Suite
from gnomon.common.config import DevServerSettings
from gnomon.devservers import PostgresServer, free_port
from gnomon.sdk.connection import aio_channel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Client settings a suite's ``client_env`` may set (cleared between runs).
CLIENT_VARS = ("GNOMON_API", "GNOMON_INSECURE", "GNOMON_API_KEY", "GNOMON_API_KEY_FILE", "GNOMON_TLS_CA_FILE")
#: The TypeScript SDK's no-op worker (``libs/sdk-ts/examples/noop-worker.ts``, built by ``npm run build``).
TS_WORKER = os.path.join(ROOT, "libs", "sdk-ts", "dist", "examples", "noop-worker.js")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a live process, MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds a live process has used (with ``children``: plus its live children's,
    e.g. a PostgreSQL postmaster's backends); 0.0 when it is gone."""
    try:
        procs = [psutil.Process(pid)]
        if children:
            procs += procs[0].children(recursive=True)
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def cpu_snapshot(suite: Suite, workers, pg: PostgresServer | None) -> dict[str, float]:
    """CPU seconds used so far per role: dispatcher(s) and api summed over their processes, the worker
    processes summed, and the embedded PostgreSQL (postmaster and backends) when the bench started it."""
    out: dict[str, float] = {}
    for p in suite.procs:
        if p.role in ("api", "dispatcher"):
            out[p.role] = out.get(p.role, 0.0) + cpu_seconds(p.popen.pid)
    out["workers"] = sum(cpu_seconds(w.popen.pid, children=True) for w in workers)
    if pg is not None and pg.pid:
        out["postgres"] = cpu_seconds(pg.pid, children=True)
    return out


async def enqueue(api: str, queue: str, n: int, concurrency: int, delay_s: float = 0.0) -> float:
    """Creates ``n`` jobs with ``concurrency`` calls in flight; returns jobs/s."""
    async with aio_channel(api, unary_only=True) as ch:
        stub = jg.JobServiceStub(ch)
        left = n
        t0 = time.perf_counter()

        async def one_worker():
            nonlocal left
            while left > 0:
                left -= 1
                req = js.CreateJobRequest(queue=queue)
                if delay_s:
                    req.delay.FromMilliseconds(int(delay_s * 1000))
                await stub.CreateJob(req, timeout=30)

        await asyncio.gather(*[one_worker() for _ in range(concurrency)])
        return n / (time.perf_counter() - t0)


async def enqueue_batched(
    api: str, queue: str, n: int, batch: int, concurrency: int = 4, due: datetime | None = None
) -> float:
    """Creates ``n`` jobs with ``BatchCreateJobs`` of ``batch`` each, ``concurrency`` in flight, due
    now or at ``due`` (``schedule_time``); returns jobs/s."""
    async with aio_channel(api, unary_only=True) as ch:
        stub = jg.JobServiceStub(ch)
        sizes = [min(batch, n - i) for i in range(0, n, batch)]
        one = js.CreateJobRequest(queue=queue)
        if due is not None:
            one.schedule_time.FromDatetime(due)
        t0 = time.perf_counter()

        async def one_worker():
            while sizes:
                k = sizes.pop()
                await stub.BatchCreateJobs(js.BatchCreateJobsRequest(requests=[one] * k), timeout=60)

        await asyncio.gather(*[one_worker() for _ in range(concurrency)])
        return n / (time.perf_counter() - t0)


async def paced(api: str, queue: str, rate: float, seconds: float, delay_s: float) -> int:
    """Creates jobs at ``rate`` per second for ``seconds`` (each call its own task, started on
    schedule whether or not the earlier ones finished); returns how many. Raises the first failed
    call's ``AioRpcError`` after all have ended."""
    async with aio_channel(api, unary_only=True) as ch:
        stub = jg.JobServiceStub(ch)
        n = int(rate * seconds)

        async def one() -> None:
            req = js.CreateJobRequest(queue=queue)
            if delay_s:
                req.delay.FromMilliseconds(int(delay_s * 1000))
            await stub.CreateJob(req, timeout=30)

        t0 = time.perf_counter()
        tasks = []
        for i in range(n):
            target = t0 + i / rate
            now = time.perf_counter()
            if target > now:
                await asyncio.sleep(target - now)
            tasks.append(asyncio.create_task(one()))
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        return n


def q(conn, sql: str, *args):
    return conn.execute(sql, args).fetchall()


def wait_connected(workers, dispatchers: int, timeout_s: float = 60.0) -> None:
    """Waits until every worker process has logged ``...: connected, N credit(s) ...`` (both SDKs log
    it when a dispatcher's welcome arrives) ``dispatchers`` times. Raises ``SystemExit`` after
    ``timeout_s`` or when a worker has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = []
        for w in workers:
            if w.popen.poll() is not None:
                raise SystemExit(f"worker exited with {w.popen.returncode}; see {w.log_path}")
            with open(w.log_path, errors="replace") as f:
                seen.append(f.read().count("): connected, "))
        if min(seen) >= dispatchers:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"workers not connected after {timeout_s:.0f} s (connections seen: {seen})")
        time.sleep(0.05)


def wait_done(conn, queue: str, n: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if q(conn, "SELECT count(*) FROM jobs WHERE queue = %s AND state = 'SUCCEEDED'", queue)[0][0] >= n:
            return True
        time.sleep(0.5)  # the count costs the database CPU, which the drain_cpu figures include
    return False


def lag_ms(conn, queue: str) -> tuple[float, float]:
    r = q(
        conn,
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.99) WITHIN GROUP "
        "(ORDER BY d) FROM (SELECT extract(epoch FROM dispatched_at - scheduled_at) * 1000 AS d "
        "FROM jobs WHERE queue = %s) x",
        queue,
    )[0]
    return round(float(r[0] or 0), 2), round(float(r[1] or 0), 2)


def start_worker(suite: Suite, args):
    """One worker process serving the benchmark's queues with a no-op handler, in ``args.workers_lang``."""
    queues = ["drain", "lag-now", "lag-later"]
    if args.workers_lang == "ts":
        if not os.path.isfile(TS_WORKER):
            raise SystemExit(f"{TS_WORKER} is missing: run scripts/bootstrap (it builds libs/sdk-ts)")
        return suite.start_worker_command(["node", TS_WORKER, str(args.concurrency), *queues])
    return suite.start_worker(
        queues,
        "bench.handlers:noop",
        concurrency=args.concurrency,
        # INFO: wait_connected reads the connection lines of the worker's log
        env={
            "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p),
            "GNOMON_LOG_LEVEL": "INFO",
        },
    )


def one_run(args, run: int, pg: PostgresServer | None) -> dict:
    db = f"bench_{uuid.uuid4().hex[:8]}"
    url = pg.create_database(db) if pg else args.dsn
    insecure = bool(getattr(args, "insecure", False))
    for var in CLIENT_VARS:  # nothing left over from a previous run's suite (its files are gone)
        os.environ.pop(var, None)
    suite = Suite(
        api_listen=f"127.0.0.1:{free_port()}",
        dispatchers=args.dispatchers,
        database_url=url,
        env={"GNOMON_DISPATCHER_CLAIM_BATCH": str(args.claim_batch)},
        insecure=insecure,
    )
    suite.start()
    os.environ.update(suite.client_env())  # this process's channels: TLS with the suite's CA, its admin key
    try:
        api = suite.api_address
        plain = url.replace("postgresql+psycopg://", "postgresql://").replace(
            "cockroachdb+psycopg://", "postgresql://"
        )
        monitor = Monitor(plain) if args.write_set else None
        # with --write-set the bench's polls go through the monitor's connection (not counted)
        conn = monitor.conn if monitor else psycopg.connect(plain, autocommit=True)
        single = asyncio.run(enqueue(api, "single", args.single_jobs, args.enqueue_concurrency))
        t_start = time.perf_counter()
        workers = [start_worker(suite, args) for _ in range(args.workers)]
        wait_connected(workers, args.dispatchers)
        worker_start_s = time.perf_counter() - t_start
        lead = args.gate_lead if args.gate_lead is not None else 2.0 + args.jobs / 4000
        if monitor and args.gate_lead is None:  # room for the checkpoint and the settling
            lead += 3.0 + args.write_set_settle
        marks = EnqueueAndDrain(monitor, args.write_set_settle) if monitor else None
        if marks:
            marks.before_enqueue()
        # T by the database clock, which decides what is due
        due = q(conn, "SELECT now() + make_interval(secs => %s)", lead)[0][0]
        enq = asyncio.run(enqueue_batched(api, "drain", args.jobs, args.batch_size, due=due))
        left_s = q(conn, "SELECT extract(epoch FROM %s - clock_timestamp())", due)[0][0]
        gate_missed = float(left_s) <= 0
        if marks:
            marks.after_enqueue()
            left_s = q(conn, "SELECT extract(epoch FROM %s - clock_timestamp())", due)[0][0]
            gate_missed = gate_missed or float(left_s) <= 0
        time.sleep(max(0.0, float(left_s)))
        cpu0 = cpu_snapshot(suite, workers, pg)
        ok = wait_done(conn, "drain", args.jobs, args.timeout)
        cpu1 = cpu_snapshot(suite, workers, pg)
        write_set = marks.after_drain(args.jobs, args.verbose) if marks else None
        # CPU per drained job, microseconds, per role: stable under a loaded machine (unlike jobs/s),
        # so before/after comparisons of one change do not need a quiet box
        cpu_us: dict[str, float] | None = {
            k: round(1e6 * (v - cpu0.get(k, 0.0)) / args.jobs, 1) for k, v in cpu1.items()
        }
        if gate_missed:  # cpu0 came after T: part of the drain's CPU would be missing
            cpu_us = None
        t_first, t_last = q(
            conn, "SELECT min(scheduled_at), max(finished_at) FROM jobs WHERE queue = 'drain'"
        )[0]
        drain_s = (t_last - t_first).total_seconds() if ok else float("nan")
        drain_lag = lag_ms(conn, "drain")
        asyncio.run(paced(api, "lag-now", args.lag_rate, args.lag_seconds, 0.0))
        asyncio.run(paced(api, "lag-later", args.lag_rate, args.lag_seconds, args.later))
        n_lag = int(args.lag_rate * args.lag_seconds)
        ok = ok and wait_done(conn, "lag-now", n_lag, 60) and wait_done(conn, "lag-later", n_lag, 60)
        now_lag, later_lag = lag_ms(conn, "lag-now"), lag_ms(conn, "lag-later")
        total = args.jobs + 2 * n_lag
        exact = q(
            conn,
            "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt = 1) FROM jobs "
            "WHERE queue <> 'single'",
        )[0]
        attempts = q(conn, "SELECT count(*) FROM attempts WHERE accepted_at IS NOT NULL")[0][0]
        ok = ok and exact == (total, total) and attempts == total
        rss: dict[str, float | list[float]] = {
            p.role: peak_rss_mb(p.popen.pid) for p in suite.procs if p.role in ("api", "dispatcher")
        }
        rss["workers"] = [peak_rss_mb(w.popen.pid) for w in workers]
        conn.close()
        return {
            "bench": "gnomon",
            "run": run,
            "jobs": args.jobs,
            "workers": args.workers,
            "dispatchers": args.dispatchers,
            "workers_lang": args.workers_lang,
            "enqueue_jobs_per_s": round(enq, 1),
            "enqueue_single_jobs_per_s": round(single, 1),
            "drain_jobs_per_s": round(args.jobs / drain_s, 1) if ok else None,
            "worker_start_s": round(worker_start_s, 2),
            "gate_missed": gate_missed,
            "dispatch_lag_p50_ms": now_lag[0],
            "dispatch_lag_p99_ms": now_lag[1],
            "dispatch_lag_due_later_p50_ms": later_lag[0],
            "dispatch_lag_due_later_p99_ms": later_lag[1],
            "drain_dispatch_lag_p99_ms": drain_lag[1],
            "drain_cpu_us_per_job": cpu_us,
            "lag_rate_per_s": args.lag_rate,
            "peak_rss_mb": rss,
            "durable": pg is None or pg.durable,
            "security": "insecure" if insecure else "tls+api-key",
            "ok": ok,
            **({"write_set": write_set, "write_set_window_late": gate_missed} if monitor else {}),
        }
    finally:
        suite.stop()
        if pg:
            pg.drop_database(db)


def compare_auth(args, pg: PostgresServer | None) -> None:
    """``args.runs`` pairs of runs, secure and insecure interleaved (the first of each pair
    alternates); prints every run and then the medians and the cost of security in percent
    (``(insecure - secure) / insecure``) for ``CreateJob`` per call and for the drain."""
    import statistics

    got: dict[bool, list[dict]] = {True: [], False: []}
    for run in range(1, args.runs + 1):
        for insecure in (run % 2 == 0, run % 2 == 1):
            args.insecure = insecure
            r = one_run(args, run, pg)
            got[insecure].append(r)
            print(json.dumps(r), flush=True)

    def median(insecure: bool, key: str) -> float:
        return statistics.median(r[key] or 0.0 for r in got[insecure])

    summary: dict[str, object] = {"bench": "auth-cost", "runs": args.runs}
    for key, name in (("enqueue_single_jobs_per_s", "create_job"), ("drain_jobs_per_s", "drain")):
        secure, plain = median(False, key), median(True, key)
        summary[f"{name}_secure_per_s"] = secure
        summary[f"{name}_insecure_per_s"] = plain
        summary[f"{name}_cost_pct"] = round(100 * (plain - secure) / plain, 1) if plain else None
    summary["ok"] = all(r["ok"] for rs in got.values() for r in rs)
    print(json.dumps(summary), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument(
        "--dsn", default=None, help="Use this database (SQLAlchemy URL) instead of embedded PostgreSQL."
    )
    ap.add_argument(
        "--dispatchers",
        type=int,
        default=1,
        help="Dispatcher processes (shards split between them by etcd leases; every worker connects to all).",
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        default=1024,
        help="Credits per worker process (attempts it holds at once). 1024: with 512 the drain ran "
        "~8 %% slower, with 2048 no faster; with 256 ~15 %% slower than 512 (bench/README.md). The "
        "pgqueuer peer's workers have no limit on tasks in flight.",
    )
    ap.add_argument("--enqueue-concurrency", type=int, default=64, help="CreateJob calls in flight.")
    ap.add_argument(
        "--single-jobs", type=int, default=2000, help="Jobs created one CreateJob each (not drained)."
    )
    ap.add_argument(
        "--batch-size", type=int, default=500, help="Jobs per BatchCreateJobs for the drain jobs."
    )
    ap.add_argument("--claim-batch", type=int, default=500)
    ap.add_argument(
        "--gate-lead",
        type=float,
        default=None,
        help="Seconds from the start of the drain jobs' enqueue to their common due time, the drain's "
        "start signal (default: 2 + jobs / 4000).",
    )
    ap.add_argument(
        "--rate",
        "--lag-rate",
        dest="lag_rate",
        type=float,
        default=200.0,
        help="Jobs created per second in the steady dispatch-lag phase (due now, then due later). "
        "The goal rate is 500, but one API process takes ~350-460 CreateJob/s (64 in flight) on the "
        "2-core benchmark machine beside the rest of the suite (bench/README.md), so 500 overloads it; "
        "the default stays 200.",
    )
    ap.add_argument("--lag-seconds", type=float, default=5.0)
    ap.add_argument("--later", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument(
        "--fast", action="store_true", help="Embedded PostgreSQL without fsync (reported as durable=false)."
    )
    ap.add_argument(
        "--insecure",
        action="store_true",
        help="Run the suite with GNOMON_INSECURE=true (no TLS, no authentication).",
    )
    ap.add_argument(
        "--workers-lang",
        choices=("python", "ts", "both"),
        default="python",
        help="SDK of the worker processes: Python, TypeScript (libs/sdk-ts), or both (each run twice).",
    )
    ap.add_argument(
        "--compare-auth",
        action="store_true",
        help="Each run twice, secure and insecure (alternating which goes first), then a summary line "
        "with the cost of TLS + authentication + authorization on CreateJob and on the drain.",
    )
    ap.add_argument(
        "--write-set",
        action="store_true",
        help="Print the drain's write set per job from the database's counters (bench/write_set.py); "
        "the embedded PostgreSQL then preloads pg_stat_statements.",
    )
    ap.add_argument(
        "--write-set-settle", type=float, default=11.0, help="Seconds for the statistics to flush."
    )
    ap.add_argument("--verbose", action="store_true", help="With --write-set: per table, index, record type.")
    args = ap.parse_args(argv)
    pg = None
    if args.dsn is None:
        extra: dict[str, object] = {"shared_preload_libraries": "pg_stat_statements", "wal_keep_size": "2GB"}
        pg = PostgresServer(
            durable=not args.fast,
            settings=extra if args.write_set else None,
            **DevServerSettings().model_dump(),
        ).start()
    try:
        if args.compare_auth:
            compare_auth(args, pg)
        else:
            langs = ("python", "ts") if args.workers_lang == "both" else (args.workers_lang,)
            for run in range(1, args.runs + 1):
                for lang in langs:
                    args.workers_lang = lang
                    print(json.dumps(one_run(args, run, pg)), flush=True)
    finally:
        if pg:
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
