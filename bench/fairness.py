"""Fairness benchmark: does one tenant's herd delay another tenant's due jobs?

Usage: ``python -m bench.fairness [--herd 100000] [--probe-rate 20] [--probe-seconds 15] [--fast]``

One run on a secure suite (TLS, the suite's admin key; embedded PostgreSQL durable unless ``--fast``),
one dispatcher, one worker process per namespace:

1. **baseline**: probe jobs in namespace ``probe`` (queue ``latency``) are created due now at
   ``--probe-rate`` per second for ``--probe-seconds``; nothing else runs;
2. **herd**: ``--herd`` no-op jobs of namespace ``herd`` (queue ``bulk``) are enqueued far in the
   future, then made due at one instant (one UPDATE, the herd of a missed schedule or a bulk import);
   while the herd drains, probe jobs are created as in 1.

Prints one JSON line: the probe's dispatch lag (``dispatched_at - scheduled_at``, database clock)
p50/p99/max for the baseline and during the herd, the herd's drain rate, and ``ok`` (every job
SUCCEEDED once). The claim loop takes each (namespace, queue) with workers as its own target, each
up to ``GNOMON_DISPATCHER_CLAIM_BATCH`` per claim transaction, so a herd costs another tenant at most
the time of one claim round, never a place at the back of the herd.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

import psycopg

from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon.cli.suite import Suite
from gnomon.common.config import DevServerSettings
from gnomon.devservers import PostgresServer, free_port
from gnomon.sdk.connection import aio_channel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def probes(api: str, rate: float, seconds: float) -> int:
    """Creates probe jobs (namespace ``probe``, queue ``latency``, due now) at ``rate``/s; returns how many."""
    async with aio_channel(api) as ch:
        stub = jg.JobServiceStub(ch)
        n = int(rate * seconds)
        t0 = time.perf_counter()
        tasks = []
        for i in range(n):
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            req = js.CreateJobRequest(parent="namespaces/probe", queue="latency")
            tasks.append(asyncio.ensure_future(stub.CreateJob(req, timeout=30)))
        await asyncio.gather(*tasks)
        return n


async def herd(api: str, n: int, batch: int = 500) -> None:
    """Creates ``n`` jobs of namespace ``herd`` due in an hour (made due later in one UPDATE)."""
    async with aio_channel(api) as ch:
        stub = jg.JobServiceStub(ch)
        sizes = [min(batch, n - i) for i in range(0, n, batch)]

        async def one() -> None:
            while sizes:
                k = sizes.pop()
                req = js.CreateJobRequest(queue="bulk")
                req.delay.FromSeconds(3600)
                await stub.BatchCreateJobs(
                    js.BatchCreateJobsRequest(parent="namespaces/herd", requests=[req] * k), timeout=120
                )

        await asyncio.gather(*[one() for _ in range(4)])


def row(conn, sql: str, args: tuple = ()) -> tuple:
    """The one row ``sql`` returns."""
    r = conn.execute(sql, args).fetchone()
    assert r is not None, sql
    return r


def lag(conn, after: object, before: object) -> dict[str, float]:
    """Probe dispatch lag (ms) of probe jobs scheduled in [after, before)."""
    r = row(
        conn,
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.99) WITHIN GROUP "
        "(ORDER BY d), max(d), count(*) FROM (SELECT extract(epoch FROM dispatched_at - scheduled_at) "
        "* 1000 AS d FROM jobs WHERE namespace = 'probe' AND scheduled_at >= %s AND scheduled_at < %s) x",
        (after, before),
    )
    return {
        "p50_ms": round(float(r[0] or 0), 1),
        "p99_ms": round(float(r[1] or 0), 1),
        "max_ms": round(float(r[2] or 0), 1),
        "n": r[3],
    }


def wait_state(conn, sql: str, want: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if row(conn, sql)[0] >= want:
            return True
        time.sleep(0.2)
    return False


def run(args) -> dict:
    pg = PostgresServer(durable=not args.fast, **DevServerSettings().model_dump()).start()
    db = f"fair_{uuid.uuid4().hex[:8]}"
    url = pg.create_database(db)
    suite = Suite(api_listen=f"127.0.0.1:{free_port()}", database_url=url)
    try:
        suite.start()
        os.environ.update(suite.client_env())  # this process's clients: the suite's CA and admin key
        api = suite.api_address
        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
        env = {"PYTHONPATH": ROOT}
        for ns, queue in (("probe", "latency"), ("herd", "bulk")):
            suite.start_worker(
                [queue], "bench.handlers:noop", concurrency=256, env=env, extra=["--namespace", ns]
            )
        time.sleep(2)  # workers connected
        t0 = row(conn, "SELECT now()")[0]
        n_base = asyncio.run(probes(api, args.probe_rate, args.probe_seconds))
        t1 = row(conn, "SELECT now()")[0]
        asyncio.run(herd(api, args.herd))
        t2 = row(conn, "UPDATE jobs SET scheduled_at = now() WHERE namespace = 'herd' RETURNING now()")[0]
        n_herd = asyncio.run(probes(api, args.probe_rate, args.probe_seconds))
        t3 = row(conn, "SELECT now()")[0]
        done = wait_state(
            conn,
            "SELECT count(*) FROM jobs WHERE namespace = 'herd' AND state = 'SUCCEEDED'",
            args.herd,
            args.timeout,
        )
        first, last = row(
            conn, "SELECT min(dispatched_at), max(finished_at) FROM jobs WHERE namespace = 'herd'"
        )
        herd_left_at_t3 = row(
            conn,
            "SELECT count(*) FROM jobs WHERE namespace = 'herd' AND (dispatched_at IS NULL OR dispatched_at > %s)",
            (t3,),
        )[0]
        wait_state(
            conn,
            "SELECT count(*) FROM jobs WHERE namespace = 'probe' AND state = 'SUCCEEDED'",
            n_base + n_herd,
            60,
        )
        exact = row(
            conn, "SELECT count(*), count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt = 1) FROM jobs"
        )
        out = {
            "bench": "fairness",
            "herd_jobs": args.herd,
            "probe_rate_per_s": args.probe_rate,
            "probe_lag_baseline": lag(conn, t0, t1),
            "probe_lag_during_herd": lag(conn, t2, t3),
            "herd_not_yet_dispatched_when_probes_ended": herd_left_at_t3,
            "herd_drain_jobs_per_s": round(args.herd / (last - first).total_seconds(), 1) if done else None,
            "durable": not args.fast,
            "ok": done and exact[0] == exact[1] == args.herd + n_base + n_herd,
        }
        conn.close()
        return out
    finally:
        suite.stop()
        pg.drop_database(db)
        pg.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--herd", type=int, default=100_000)
    ap.add_argument("--probe-rate", type=float, default=20.0)
    ap.add_argument("--probe-seconds", type=float, default=15.0)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--fast", action="store_true", help="Embedded PostgreSQL without fsync.")
    print(json.dumps(run(ap.parse_args(argv))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
