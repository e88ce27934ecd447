"""Planner benchmark: N schedules firing every minute, the real Planner, figures as one JSON line.

Usage: ``python -m bench.planner --schedules 100000 --minutes 3 [--planners 1] [--batch 200]
[--overlap allow|skip] [--lookahead 30] [--complete-jobs] [--dsn URL] [--fast]``

1. an embedded PostgreSQL is started **durable** (fsync and synchronous_commit on; ``--fast``: off,
   reported ``"durable": false``) and a fresh database migrated;
2. N schedules ``* * * * *`` (UTC, overlap ALLOW or SKIP, every other field the API default) are
   bulk-inserted: one row with exactly the columns ``insert_schedule`` writes for a validated
   CreateSchedule request, copied N-1 times in SQL with another ``schedule_id``/``uid``; then all are
   made due at the first minute boundary M0 (``planned_through`` = M0 - 1 s, ``next_fire_at`` =
   ``plan_at`` = M0, as ``insert_schedule`` sets them);
3. ``--planners`` processes each run the real ``Planner.run`` loop (database clock, no hints) from
   before M0 until the last measured minute's next boundary; each ``plan_once`` step is timed, and
   the decision records / jobs it committed are tallied by nominal minute;
4. figures: ``plan_schedules_per_s`` (schedules per second of plan_once step time, summed over
   planners), ``herd_schedules_per_s`` per minute (N / first step start to last commit),
   ``jobs_per_minute`` (occurrence jobs committed per nominal minute), ``lag_s`` per minute (minute
   boundary -> commit of the step that completed its N decisions; negative = planned ahead, ALLOW
   plans ``lookahead`` early) with p50/max, ``keeps_up`` (every minute complete before the next
   boundary), step duration p50/p99 and SQL statements per step, ``peak_rss_mb`` (VmHWM of each
   planner process).

SKIP needs the schedule's active occurrences: without workers the first minute's jobs stay SCHEDULED,
so later minutes are recorded SKIPPED_OVERLAP (a decision record, no job); ``--complete-jobs`` marks
due occurrence jobs SUCCEEDED every second (a stand-in for workers; it costs database time too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import statistics
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

UTC = UTC


# -- planner process -------------------------------------------------------------------------------
def planner_process(url: str, batch: int, lookahead: float, end_wall: float, out) -> None:
    out.put(asyncio.run(_planner_main(url, batch, lookahead, end_wall)))


async def _planner_main(url: str, batch: int, lookahead: float, end_wall: float) -> dict:
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import AsyncConnection

    import gnomon.common.scheduling.occurrences as occ
    from gnomon.common.config import DatabaseSettings, PlannerSettings
    from gnomon.common.storage.engine import make_engine
    from gnomon.common.storage.planning import Writes
    from gnomon.common.storage.planning import flush as orig_flush
    from gnomon.planner.planning import Planner

    settings = PlannerSettings(batch=batch, lookahead_s=lookahead)
    engine = make_engine(
        DatabaseSettings(url=url),
        pool_size=3,
        session_options={"idle_in_transaction_session_timeout": settings.idle_in_transaction_timeout_ms},
    )
    stmts = [0]

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _count(*_a, **_k):
        stmts[0] += 1

    last_flush: dict = {}

    async def counting_flush(conn: AsyncConnection, w: Writes) -> set[uuid.UUID]:
        inserted = await orig_flush(conn, w)
        tally: dict[float, list[int]] = {}
        for r in w.records:
            tally.setdefault(r["nominal_time"].timestamp(), [0, 0])[0] += 1
        for j in w.jobs:
            if j["id"] in inserted:
                tally.setdefault(j["nominal_time"].timestamp(), [0, 0])[1] += 1
        last_flush.clear()  # one flush per transaction attempt: a retried attempt replaces it
        last_flush.update(tally)
        return inserted

    occ.flush = counting_flush  # type: ignore[attr-defined]  # monkeypatch: occurrences' imported flush, to tally it
    p = Planner(engine, settings, region="local", shards=64)
    steps: list = []
    errors = [0]
    orig_plan = p.plan_once

    async def plan_once(now=None):
        last_flush.clear()
        s0, t0 = stmts[0], time.time()
        try:
            st = await orig_plan(now)
        except Exception:
            errors[0] += 1
            raise
        t1 = time.time()
        if st.schedules:
            steps.append((t0, t1, st.schedules, st.jobs, stmts[0] - s0, dict(last_flush)))
        return st

    p.plan_once = plan_once  # type: ignore[method-assign]  # instrumented: times each step of the real run loop
    stop = asyncio.Event()
    task = asyncio.create_task(p.run(stop))
    await asyncio.sleep(max(0.0, end_wall - time.time()))
    stop.set()
    p.wake.set()
    await task
    await engine.dispose()
    return {
        "steps": steps,
        "errors": errors[0],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


# -- setup -----------------------------------------------------------------------------------------
def insert_schedules(url: str, n: int, overlap: str) -> float:
    """Bulk-inserts ``n`` every-minute schedules; returns seconds taken."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    from gnomon._proto.gnomon.v1 import schedule_pb2
    from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
    from gnomon.api.schedule_validation import validate_create
    from gnomon.common.storage.schema import schedules

    pol = {"allow": schedule_pb2.OVERLAP_POLICY_ALLOW, "skip": schedule_pb2.OVERLAP_POLICY_SKIP}[overlap]
    req = pb.CreateScheduleRequest(
        schedule_id="s0",
        schedule=schedule_pb2.Schedule(
            cron="* * * * *",
            time_zone="UTC",
            job_template=schedule_pb2.JobTemplate(queue="bench"),
            overlap_policy=pol,
        ),
    )
    new = validate_create(req, region="local")
    now = datetime.now(UTC)
    # the same columns insert_schedule writes (times are reset below)
    values = dict(
        namespace=new.namespace,
        schedule_id=new.schedule_id,
        uid=new.uid,
        region=new.region,
        **new.values.columns(),
        paused=new.values.paused,
        skip_through=None,
        version=1,
        created_at=now,
        updated_at=now,
        request_id=new.request_id,
        request_hash=new.request_hash,
        planned_through=now,
        next_fire_at=None,
        plan_at=None,
        buffered=0,
        missed_count=0,
        missed_first=None,
    )
    eng = create_engine(url)
    t0 = time.perf_counter()
    cols = [c.name for c in schedules.c]
    sel = ", ".join({"schedule_id": "'s' || g", "uid": "gen_random_uuid()"}.get(c, f"s.{c}") for c in cols)
    with eng.begin() as c:
        c.execute(pg_insert(schedules).values(**values))
        c.execute(
            text(
                f"INSERT INTO schedules ({', '.join(cols)}) SELECT {sel} FROM schedules s, "
                f"generate_series(1, {n - 1}) g WHERE s.schedule_id = 's0'"
            )
        )
    eng.dispose()
    return time.perf_counter() - t0


def make_due(conninfo: str, m0: datetime) -> None:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(
            "UPDATE schedules SET planned_through = %s, next_fire_at = %s, plan_at = %s",
            (m0 - timedelta(seconds=1), m0, m0),
        )
        c.execute("VACUUM ANALYZE schedules")
        c.execute("ANALYZE jobs")
        c.execute("ANALYZE schedule_occurrences")


def completer(conninfo: str, stop: threading.Event, counter: list) -> None:
    """Marks due occurrence jobs SUCCEEDED every second (stand-in for workers, ``--complete-jobs``)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as c:
        while not stop.wait(1.0):
            cur = c.execute(
                "UPDATE jobs SET state = 'SUCCEEDED', finished_at = now() "
                "WHERE state = 'SCHEDULED' AND schedule_uid IS NOT NULL AND scheduled_at <= now()"
            )
            counter[0] += cur.rowcount


def pct(xs: list[float], p: float) -> float:
    """The nearest-rank ``p`` quantile of ``xs`` (not empty: callers report None for no samples)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


# -- main ------------------------------------------------------------------------------------------
def run(args, url: str, conninfo: str, durable: bool) -> dict:
    from gnomon.common.storage.migrations import upgrade

    upgrade(url)
    insert_s = insert_schedules(url, args.schedules, args.overlap)
    t = time.time() + args.warmup
    m0 = datetime.fromtimestamp((int(t) // 60 + 1) * 60, UTC)
    make_due(conninfo, m0)
    minutes = [m0.timestamp() + 60 * k for k in range(args.minutes)]
    end_wall = minutes[-1] + 60 + 1.0
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=planner_process, args=(url, args.batch, args.lookahead, end_wall, out))
        for _ in range(args.planners)
    ]
    for pr in procs:
        pr.start()
    stop, completed = threading.Event(), [0]
    th = None
    if args.complete_jobs:
        th = threading.Thread(target=completer, args=(conninfo, stop, completed), daemon=True)
        th.start()
    results = [out.get(timeout=end_wall - time.time() + 120) for _ in procs]
    for pr in procs:
        pr.join(30)
    stop.set()
    if th:
        th.join(10)

    n = args.schedules
    steps = [s for r in results for s in r["steps"]]
    events = sorted((s[1], s[5]) for s in steps)
    per_minute: list[dict[str, Any]] = []
    for m in minutes:
        cum_rec = cum_jobs = 0
        done_at = None
        first_start = min((s[0] for s in steps if m in s[5]), default=None)
        for t1, tally in events:
            if m in tally:
                cum_rec += tally[m][0]
                cum_jobs += tally[m][1]
                if done_at is None and cum_rec >= n:
                    done_at = t1
        per_minute.append(
            dict(
                minute=datetime.fromtimestamp(m, UTC).strftime("%H:%M"),
                records=cum_rec,
                jobs=cum_jobs,
                lag_s=None if done_at is None else round(done_at - m, 2),
                herd_schedules_per_s=None
                if done_at is None or first_start is None
                else round(n / max(done_at - first_start, 1e-6), 1),
            )
        )
    lags = [pm["lag_s"] for pm in per_minute if pm["lag_s"] is not None]
    keeps_up = len(lags) == len(minutes) and all(lag < 60 for lag in lags)
    durs = [s[1] - s[0] for s in steps]
    by_proc_rate = [
        sum(s[2] for s in r["steps"]) / max(sum(s[1] - s[0] for s in r["steps"]), 1e-9)
        for r in results
        if r["steps"]
    ]
    full = [s for s in steps if s[2] >= args.batch]
    return {
        "bench": "planner",
        "schedules": n,
        "minutes": args.minutes,
        "planners": args.planners,
        "overlap": args.overlap.upper(),
        "batch": args.batch,
        "lookahead_s": args.lookahead,
        "complete_jobs": args.complete_jobs,
        "insert_schedules_per_s": round(n / insert_s, 1),
        "plan_schedules_per_s": round(sum(by_proc_rate), 1),
        "steps": len(steps),
        "step_ms_p50": round(1000 * pct(durs, 0.5), 1) if durs else None,
        "step_ms_p99": round(1000 * pct(durs, 0.99), 1) if durs else None,
        "statements_per_full_step": pct([s[4] for s in full], 0.5) if full else None,
        "jobs_per_minute": [pm["jobs"] for pm in per_minute],
        "lag_s": [pm["lag_s"] for pm in per_minute],
        "lag_p50_s": round(statistics.median(lags), 2) if lags else None,
        "lag_max_s": max(lags) if lags else None,
        "herd_schedules_per_s": [pm["herd_schedules_per_s"] for pm in per_minute],
        "per_minute": per_minute,
        "keeps_up": keeps_up,
        "errors": sum(r["errors"] for r in results),
        "jobs_completed_by_bench": completed[0] if args.complete_jobs else None,
        "peak_rss_mb": [r["peak_rss_mb"] for r in results],
        "durable": durable,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.planner", description=__doc__.split("\n\n")[0])
    from gnomon.common.config import PlannerSettings

    d = PlannerSettings()
    ap.add_argument("--schedules", type=int, default=100_000)
    ap.add_argument("--minutes", type=int, default=3)
    ap.add_argument("--planners", type=int, default=1, help="Planner processes.")
    ap.add_argument("--batch", type=int, default=d.batch, help="Schedules per planning transaction.")
    ap.add_argument(
        "--lookahead", type=float, default=d.lookahead_s, help="OVERLAP ALLOW lookahead, seconds."
    )
    ap.add_argument("--overlap", choices=("allow", "skip"), default="allow")
    ap.add_argument(
        "--complete-jobs", action="store_true", help="Mark due occurrence jobs SUCCEEDED every second."
    )
    ap.add_argument(
        "--warmup", type=float, default=8.0, help="Min seconds between setup and the first boundary."
    )
    ap.add_argument(
        "--dsn",
        default=None,
        help="Use this (empty) database, SQLAlchemy URL, instead of embedded PostgreSQL.",
    )
    ap.add_argument(
        "--fast", action="store_true", help="Embedded PostgreSQL without fsync (reported as durable=false)."
    )
    args = ap.parse_args(argv)
    from gnomon.common.config import DevServerSettings
    from gnomon.devservers import PostgresServer

    pg = None
    if args.dsn is None:
        pg = PostgresServer(durable=not args.fast, **DevServerSettings().model_dump()).start()
    try:
        if pg:
            db = f"bench_{uuid.uuid4().hex[:8]}"
            url = pg.create_database(db)
            conninfo = pg.conninfo(db)
        else:
            url = args.dsn
            conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        print(json.dumps(run(args, url, conninfo, pg is None or pg.durable)), flush=True)
    finally:
        if pg:
            pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
