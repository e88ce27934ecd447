"""Herd benchmark: N no-op jobs sharing one ``scheduled_at``, W worker processes, one JSON line.

Usage: ``python -m bench.herd --jobs 1000000 --workers 2 [--dispatchers 1] [--claim-batch 500]
[--lead S] [--dsn URL] [--fast]``

One run (a fresh database; the embedded PostgreSQL is started **durable**: fsync and
synchronous_commit on, unless ``--dsn`` points elsewhere or ``--fast``):

1. the suite starts (api, ``--dispatchers`` dispatcher(s), planner, reaper processes; etcd);
2. T = database ``now()`` + ``--lead`` s (default 20 s + 1 s per 25,000 jobs); N rows are bulk-loaded
   straight into ``jobs`` with ``COPY`` (``--copy-batch`` rows per COPY), every row carrying the
   columns ``insert_jobs`` writes for a ``CreateJob(queue="herd", schedule_time=T)`` validated by
   the API's own ``validate_create`` (defaults: 3 attempts, 30 s lease, default retry policy),
   with a fresh id, ``shard = shard_of(id, 64)`` and ``idempotency_key = id``; then ``ANALYZE jobs``;
3. W ``gnomon worker`` processes (``--concurrency`` credits each, ``bench.handlers:noop``) start
   while the herd is still in the future; nothing wakes the dispatcher (no API create, no hint):
   it must find T through its own due-index look-ahead;
4. every second, psutil samples the RSS of every service process and every worker; the drain ends
   when all N are SUCCEEDED (database clock: ``scheduled_at`` -> last ``finished_at``).

Figures: ``first_dispatch_lag_ms`` (min ``dispatched_at`` - T), ``early_dispatches`` (jobs with
``dispatched_at < scheduled_at``: must be 0), ``drain_jobs_per_s`` (N / (last finish - T)),
``drain_jobs_per_s_by_tenth`` (finishes per tenth of the drain window: a steady rate is flat),
``dispatch_lag_p50/p99_ms`` over the herd, ``max_claim_batch`` (most attempts inserted by one
claim transaction: attempts grouped by ``(dispatcher_id, claimed_at)``; ``claimed_at`` is the claim
transaction's ``now()``) against ``claim_batch``, ``claims`` and ``mean_claim_batch``, and
``rss_mb`` per process: RSS at T (``at_due``), at half-drained (``mid``), at the end, the sampled
max and VmHWM; ``flat`` = max <= at_due + max(10 MiB, 10 %). ``ok`` = every job SUCCEEDED with
exactly one accepted attempt, and no early dispatch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from datetime import timedelta

import psutil
import psycopg

from bench.drain import ROOT, peak_rss_mb, q
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon.api.validation import validate_create
from gnomon.cli.suite import Suite
from gnomon.common.config import DevServerSettings
from gnomon.common.domain.jobs import ms as _ms
from gnomon.common.domain.jobs import policy_columns, shard_of
from gnomon.common.domain.states import JobState
from gnomon.devservers import PostgresServer, free_port

QUEUE = "herd"
SHARDS = 64


# -- load ------------------------------------------------------------------------------------------
def herd_row_template(due) -> tuple[list[str], dict]:
    """The columns and values ``insert_jobs`` writes for ``CreateJob(queue=QUEUE, schedule_time=due)``
    as validated by the API (``id``, ``shard``, ``idempotency_key`` are per row)."""
    req = js.CreateJobRequest(queue=QUEUE)
    req.schedule_time.FromDatetime(due)
    n = validate_create(req, region="local", shards=SHARDS)
    assert n.request_id is None and n.deadline is None and n.delay is None
    values = dict(
        id=None,
        namespace=n.namespace,
        region=n.region,
        shard=None,
        queue=n.queue,
        payload=n.payload,
        state=JobState.SCHEDULED,
        version=1,
        scheduled_at=n.schedule_at,
        deadline=n.deadline,
        max_attempts=n.max_attempts,
        attempt=0,
        idempotency_key=None,
        lease_ms=int(n.lease.total_seconds() * 1000),
        idempotent=n.idempotent,
        start_to_close_ms=_ms(n.start_to_close),
        **policy_columns(n.retry),
    )
    return list(values), values


def load_herd(conn: psycopg.Connection, due, n: int, copy_batch: int) -> float:
    """COPYs ``n`` herd rows due at ``due`` into ``jobs``, ``copy_batch`` rows per COPY (each its own
    transaction); returns seconds taken."""
    cols, values = herd_row_template(due)
    i_id, i_shard, i_key = cols.index("id"), cols.index("shard"), cols.index("idempotency_key")
    base = [values[c] for c in cols]
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(copy_batch, n - done)
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(f"COPY jobs ({', '.join(cols)}) FROM STDIN") as cp:
                for _ in range(k):
                    jid = uuid.uuid4()
                    row = list(base)
                    row[i_id], row[i_shard], row[i_key] = jid, shard_of(jid, SHARDS), str(jid)
                    cp.write_row(row)
        done += k
    return time.perf_counter() - t0


# -- memory ----------------------------------------------------------------------------------------
class RssSampler(threading.Thread):
    """Samples the RSS (MiB) of each labelled pid every ``interval`` s."""

    def __init__(self, pids: dict[str, int], interval: float = 1.0):
        super().__init__(daemon=True)
        self.procs = {k: psutil.Process(p) for k, p in pids.items()}
        self.samples: dict[str, list[tuple[float, float]]] = {k: [] for k in pids}
        self.interval = interval
        self.stop = threading.Event()

    def sample(self) -> None:
        now = time.time()
        for k, p in self.procs.items():
            try:
                self.samples[k].append((now, p.memory_info().rss / 2**20))
            except psutil.Error:
                pass

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def at(self, key: str, t: float) -> float | None:
        """The first sample at or after wall time ``t`` (else the last one)."""
        s = self.samples[key]
        for ts, v in s:
            if ts >= t:
                return round(v, 1)
        return round(s[-1][1], 1) if s else None


def pct_ms(conn, p: float) -> float:
    return round(
        float(
            q(
                conn,
                "SELECT percentile_cont(%s) WITHIN GROUP (ORDER BY extract(epoch FROM "
                "dispatched_at - scheduled_at)) * 1000 FROM jobs WHERE queue = %s",
                p,
                QUEUE,
            )[0][0]
        ),
        1,
    )


# -- run -------------------------------------------------------------------------------------------
def run(args, pg: PostgresServer | None) -> dict:
    db = f"herd_{uuid.uuid4().hex[:8]}"
    url = pg.create_database(db) if pg else args.dsn
    suite = Suite(
        api_listen=f"127.0.0.1:{free_port()}",
        database_url=url,
        dispatchers=args.dispatchers,
        env={"GNOMON_DISPATCHER_CLAIM_BATCH": str(args.claim_batch)},
    )
    suite.start()
    os.environ.update(suite.client_env())  # this process's clients: TLS with the suite's CA, its admin key
    sampler = None
    try:
        plain = url.replace("postgresql+psycopg://", "postgresql://").replace(
            "cockroachdb+psycopg://", "postgresql://"
        )
        conn = psycopg.connect(plain, autocommit=True)
        lead = args.lead if args.lead is not None else 20.0 + args.jobs / 25_000
        db_now = q(conn, "SELECT now()")[0][0]
        due = (db_now + timedelta(seconds=lead)).replace(microsecond=0)  # whole seconds: exact in protobuf
        wall_due = time.time() + (due - db_now).total_seconds()
        load_s = load_herd(conn, due, args.jobs, args.copy_batch)
        conn.execute("ANALYZE jobs")
        services = {}
        nd = 0
        for p in suite.procs:
            if p.role == "dispatcher":
                services[f"dispatcher-{nd}"] = p.popen.pid
                nd += 1
            else:
                services[p.role] = p.popen.pid
        env = {"PYTHONPATH": ROOT}
        workers = [
            suite.start_worker([QUEUE], "bench.handlers:noop", concurrency=args.concurrency, env=env)
            for _ in range(args.workers)
        ]
        pids = dict(services, **{f"worker-{i}": w.popen.pid for i, w in enumerate(workers)})
        sampler = RssSampler(pids)
        sampler.start()
        ready_before_due_s = round(wall_due - time.time(), 1)
        # wait for the drain (a light poll: the figures come from the database clock, not from this loop)
        deadline = time.monotonic() + max(0.0, wall_due - time.time()) + args.timeout
        remaining, mid_t = args.jobs, None
        while time.monotonic() < deadline:
            remaining = q(
                conn,
                "SELECT count(*) FROM jobs WHERE region = 'local' AND namespace = 'default' "
                "AND queue = %s AND state IN ('SCHEDULED', 'QUEUED', 'RUNNING')",
                QUEUE,
            )[0][0]
            if mid_t is None and remaining <= args.jobs // 2:
                mid_t = time.time()
            if remaining == 0:
                break
            time.sleep(args.poll)
        end_t = time.time()
        sampler.sample()
        sampler.stop.set()
        sampler.join(5)
        drained = remaining == 0

        sched, first, last_disp, last_fin = q(
            conn,
            "SELECT min(scheduled_at), min(dispatched_at), max(dispatched_at), "
            "max(finished_at) FROM jobs WHERE queue = %s",
            QUEUE,
        )[0]
        early = q(conn, "SELECT count(*) FROM jobs WHERE queue = %s AND dispatched_at < scheduled_at", QUEUE)[
            0
        ][0]
        distinct_due = q(conn, "SELECT count(DISTINCT scheduled_at) FROM jobs WHERE queue = %s", QUEUE)[0][0]
        exact = q(
            conn,
            "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt = 1) FROM jobs "
            "WHERE queue = %s",
            QUEUE,
        )[0]
        accepted = q(
            conn, "SELECT count(*) FROM attempts WHERE accepted_at IS NOT NULL AND queue = %s", QUEUE
        )[0][0]
        claims = q(
            conn,
            "SELECT count(*), max(c), avg(c), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY c) FROM (SELECT count(*) AS c FROM attempts "
            "WHERE queue = %s GROUP BY dispatcher_id, claimed_at) x",
            QUEUE,
        )[0]
        drain_s = (last_fin - sched).total_seconds() if drained and last_fin else None
        tenths = None
        if drain_s:
            per = dict(
                q(
                    conn,
                    "SELECT least(9, floor(10 * extract(epoch FROM finished_at - scheduled_at) / %s))::int, "
                    "count(*) FROM jobs WHERE queue = %s GROUP BY 1",
                    drain_s,
                    QUEUE,
                )
            )
            tenths = [round(per.get(i, 0) / (drain_s / 10), 1) for i in range(10)]
        rss = {}
        for k, pid in pids.items():
            s = [v for _, v in sampler.samples[k]]
            at_due = sampler.at(k, wall_due)
            mx = round(max(s), 1) if s else None
            try:
                hwm = peak_rss_mb(pid)
            except OSError:
                hwm = None
            rss[k] = {
                "at_due": at_due,
                "mid": sampler.at(k, mid_t) if mid_t else None,
                "end": round(s[-1], 1) if s else None,
                "max": mx,
                "vmhwm": hwm,
                "flat": None if at_due is None or mx is None else mx <= at_due + max(10.0, 0.1 * at_due),
            }
        svc_flat = all(rss[k]["flat"] for k in services)
        ok = drained and early == 0 and exact == (args.jobs, args.jobs) and accepted == args.jobs
        lag50, lag99 = pct_ms(conn, 0.5), pct_ms(conn, 0.99)
        conn.close()
        return {
            "bench": "herd",
            "jobs": args.jobs,
            "workers": args.workers,
            "dispatchers": args.dispatchers,
            "claim_batch": args.claim_batch,
            "concurrency": args.concurrency,
            "lead_s": lead,
            "load_jobs_per_s": round(args.jobs / load_s, 1),
            "load_s": round(load_s, 1),
            "ready_before_due_s": ready_before_due_s,
            "distinct_scheduled_at": distinct_due,
            "first_dispatch_lag_ms": round((first - sched).total_seconds() * 1000, 1) if first else None,
            "early_dispatches": early,
            "drain_s": round(drain_s, 1) if drain_s else None,
            "drain_jobs_per_s": round(args.jobs / drain_s, 1) if drain_s else None,
            "drain_jobs_per_s_by_tenth": tenths,
            "last_dispatch_lag_s": round((last_disp - sched).total_seconds(), 1) if last_disp else None,
            "dispatch_lag_p50_ms": lag50,
            "dispatch_lag_p99_ms": lag99,
            "claims": claims[0],
            "max_claim_batch": claims[1],
            "mean_claim_batch": round(float(claims[2]), 1) if claims[2] is not None else None,
            "median_claim_batch": claims[3],
            "claim_batch_bounded": claims[1] is not None and claims[1] <= args.claim_batch,
            "rss_mb": rss,
            "services_rss_flat": svc_flat,
            "worker_peak_rss_mb": [rss[f"worker-{i}"]["max"] for i in range(args.workers)],
            "rss_samples": len(sampler.samples["api"]),
            "wall_s": round(end_t - wall_due, 1),
            "durable": pg is None or pg.durable,
            "ok": ok,
        }
    finally:
        if sampler:
            sampler.stop.set()
        suite.stop()
        if pg:
            pg.drop_database(db)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.herd", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dispatchers", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=256, help="Credits per worker process.")
    ap.add_argument("--claim-batch", type=int, default=500, help="GNOMON_DISPATCHER_CLAIM_BATCH.")
    ap.add_argument(
        "--lead",
        type=float,
        default=None,
        help="Seconds from the start of the load to the herd's scheduled_at (default 20 + jobs/25,000).",
    )
    ap.add_argument("--copy-batch", type=int, default=50_000, help="Rows per COPY (one transaction each).")
    ap.add_argument("--poll", type=float, default=2.0, help="Seconds between progress polls.")
    ap.add_argument("--timeout", type=float, default=3600.0, help="Seconds allowed after scheduled_at.")
    ap.add_argument(
        "--dsn", default=None, help="Use this database (SQLAlchemy URL) instead of embedded PostgreSQL."
    )
    ap.add_argument(
        "--fast", action="store_true", help="Embedded PostgreSQL without fsync (reported as durable=false)."
    )
    args = ap.parse_args(argv)
    pg = None
    if args.dsn is None:
        pg = PostgresServer(durable=not args.fast, **DevServerSettings().model_dump()).start()
    try:
        print(json.dumps(run(args, pg)), flush=True)
    finally:
        if pg:
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
