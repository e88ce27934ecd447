"""Fault scenario 7: region failover and fail-back with jobs and a schedule due throughout.

Two regions side by side on one PostgreSQL and etcd (``a`` and ``b``, each standby for the other).
Every process of ``a`` is killed -9 while its jobs are due: ``b`` takes ``a``'s region lease (a
larger region token), serves ``a``'s shards and schedules, and ``a``'s jobs run late, not lost, on
``b``'s worker. ``a`` comes back: ``b`` gives the region back, ``a`` takes it under a larger token
again, and a write under ``b``'s token is refused by the region fence.
"""

from __future__ import annotations

import collections
import os
import signal
from datetime import timedelta

import pytest

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2_grpc
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon.cli.suite import wait_healthy
from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage import regions
from gnomon.common.storage.engine import run_transaction
from gnomon.sdk import Client
from gnomon.sdk.connection import open_channel
from gnomon_test_support import open_engine, records, running_suite, sql, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = {
    "GNOMON_ETCD_LEASE_TTL_S": "3",
    "GNOMON_DISPATCHER_FAILOVER_AFTER_S": "2",
    "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.3",
    "GNOMON_PLANNER_LOOKAHEAD_S": "1",
}


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        regions=["a", "b"],
        env=FAST,
    ) as s:
        yield s


def owner(url: str, region: str):
    rows = sql(url, "SELECT owner_region, token FROM region_owners WHERE region = %s", region)
    return rows[0] if rows else None


def test_region_failover_and_fail_back_late_not_lost_and_fenced(suite):
    url = suite.database_url
    record = os.path.join(suite.base_dir, "x.txt")
    env = {"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR}
    worker_b = suite.start_worker(
        ["x"], "gnomon_test_handlers:record", env=env, extra=["--api", suite.api_address_of("b")]
    )
    _, token_a1 = wait_for(lambda: owner(url, "a"), 20, "region a owned by a")
    assert owner(url, "a")[0] == "a" and owner(url, "b")[0] == "b"
    with Client(api=suite.api_address_of("a")) as c:
        names = [c.create_job("x", b"", delay=timedelta(seconds=4)).name for _ in range(30)]
        assert {c.get_job(n).region for n in names[:3]} == {"a"}
    with grpc_channel(suite.api_address_of("a")) as stub:
        stub.CreateSchedule(
            spb.CreateScheduleRequest(
                schedule_id="tick",
                schedule=schedule_pb2.Schedule(
                    cron="* * * * * *",
                    overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
                    job_template=schedule_pb2.JobTemplate(queue="x"),
                ),
            )
        )
    # region a fails: every one of its processes dies at once
    dead = [p for p in suite.procs if p.region == "a" and p.role != "worker"]
    for p in dead:
        os.kill(p.popen.pid, signal.SIGKILL)
        p.popen.wait()
    killed_at = sql(url, "SELECT now()")[0][0]
    owner_b = wait_for(
        lambda: (o := owner(url, "a")) and o[0] == "b" and o, 30, "region b to take over region a"
    )
    token_b = owner_b[1]
    assert token_b > token_a1  # the region token grew
    # a's jobs are late, not lost: they run on b's worker, dispatched by b's dispatcher, never early
    wait_for(
        lambda: (
            sql(
                url,
                "SELECT count(*) FROM jobs WHERE id::text = ANY(%s) AND state = 'SUCCEEDED'",
                [n.rsplit("/", 1)[1] for n in names],
            )
            == [(30,)]
        ),
        60,
        "region a's jobs to finish",
    )
    rows = sql(
        url,
        "SELECT j.scheduled_at, j.dispatched_at, a.dispatcher_id FROM jobs j JOIN attempts a "
        "ON a.job_id = j.id WHERE j.id::text = ANY(%s)",
        [n.rsplit("/", 1)[1] for n in names],
    )
    assert all(d >= s for s, d, _ in rows)
    b_dispatchers = {p.popen.pid for p in suite.procs if p.region == "b" and p.role == "dispatcher"}
    assert all(any(f"-{pid}-" in disp for pid in b_dispatchers) for _, _, disp in rows)
    counts = collections.Counter(r[0] for r in records(record))
    assert all(counts[n] == 1 for n in names)
    # a's schedule keeps being planned (by b's planner) during the failover
    wait_for(
        lambda: (
            sql(
                url,
                "SELECT count(*) FROM jobs WHERE schedule_id = 'tick' AND nominal_time > %s",
                killed_at + timedelta(seconds=8),
            )[0][0]
            > 0
        ),
        30,
        "region a's schedule planned by b",
    )
    # fail-back: region a comes back and takes its region over under a larger token
    for role in ("dispatcher", "planner", "reaper", "api"):
        p = suite.start_service(
            role, env=suite.dispatcher_env("a") if role == "dispatcher" else {"GNOMON_REGION": "a"}
        )
        wait_healthy(p.address)
    back = wait_for(
        lambda: (o := owner(url, "a")) and o[0] == "a" and o, 30, "region a to take its region back"
    )
    assert back[1] > token_b
    # the standby's token is refused by the region fence from now on
    engine = open_engine(url, pool_size=1)
    try:
        import asyncio

        async def stale():
            await run_transaction(engine, lambda c: regions.check_region_fence(c, region="a", token=token_b))

        with pytest.raises(StaleFencingToken):
            asyncio.run(stale())
    finally:
        asyncio.run(engine.dispose())
    # and region a serves new jobs itself again
    worker_a = suite.start_worker(
        ["x"], "gnomon_test_handlers:record", env=env, extra=["--api", suite.api_address_of("a")]
    )
    with Client(api=suite.api_address_of("a")) as c:
        more = [c.create_job("x", b"").name for _ in range(5)]
    wait_for(
        lambda: all(collections.Counter(r[0] for r in records(record))[n] == 1 for n in more),
        60,
        "new region a jobs to run",
    )
    ticks = [r[0] for r in sql(url, "SELECT nominal_time FROM jobs WHERE schedule_id = 'tick' ORDER BY 1")]
    assert len(ticks) == len(set(ticks))  # each nominal time planned once, across both
    for w in (worker_a, worker_b):
        suite.stop_proc(w)


class grpc_channel:
    """A ScheduleService stub on a channel closed on exit."""

    def __init__(self, address: str):

        self.ch = open_channel(address)

    def __enter__(self):
        return schedule_service_pb2_grpc.ScheduleServiceStub(self.ch)

    def __exit__(self, *exc):
        self.ch.close()
