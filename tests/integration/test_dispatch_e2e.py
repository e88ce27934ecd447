"""One-time jobs end to end through real processes: ``gnomon api``, ``gnomon dispatcher``,
``gnomon planner``, ``gnomon reaper`` and ``gnomon worker`` processes, a real PostgreSQL and etcd.

Executions are recorded by the workers' handler (tests/gnomon_test_handlers.py) in a file; the
database is read directly to check the timeline (scheduled_at, dispatched_at by the DB clock).
"""

from __future__ import annotations

import collections
import os
import signal
import time
from datetime import timedelta

import pytest

from gnomon.cli.suite import Suite
from gnomon.sdk import Client
from gnomon_test_support import records, running_suite, scrape, sql, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("suite"),
        env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1"},
    ) as s:
        yield s


def start_workers(suite: Suite, queue: str, n: int, record: str, concurrency: int = 32):
    env = {"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR}
    return [
        suite.start_worker([queue], "gnomon_test_handlers:record", concurrency=concurrency, env=env)
        for _ in range(n)
    ]


def test_job_due_in_one_second_is_not_dispatched_early_and_finishes(suite):
    record = os.path.join(suite.work_dir, "due1s.txt")
    workers = start_workers(suite, "due1s", 1, record)
    try:
        with Client(api=suite.api_address) as c:
            job = c.create_job("due1s", b"{}", delay=timedelta(seconds=1))
            assert job.state == "SCHEDULED"
            done = wait_for(
                lambda: (j := c.get_job(job.name)).state == "SUCCEEDED" and j, 30, "job to succeed"
            )
        assert done.attempt == 1
        job_id = job.name.rsplit("/", 1)[1]
        [(sched, disp, started, finished)] = sql(
            suite.database_url,
            "SELECT scheduled_at, dispatched_at, started_at, finished_at FROM jobs WHERE id = %s",
            job_id,
        )
        assert disp >= sched and started >= sched and finished >= started  # never early (DB clock)
        assert disp - sched < timedelta(seconds=5)  # and not stuck
        assert sched - done.create_time == timedelta(seconds=1)
        assert [r[0] for r in records(record)] == [job.name]
        # GNOMON_EVENT_LOOP unset: every service process and the worker run on uvloop
        for p in [*suite.procs]:
            with open(p.log_path, errors="replace") as f:
                assert "event loop: uvloop)" in f.read(), f"{p.role}: {p.log_path}"
    finally:
        for w in workers:
            suite.stop_proc(w)


@pytest.mark.parametrize("n_workers", [1, 3])
def test_thousand_jobs_due_now_finish_exactly_once(suite, n_workers):
    queue = f"bulk{n_workers}"
    record = os.path.join(suite.work_dir, f"{queue}.txt")
    workers = start_workers(suite, queue, n_workers, record)
    try:
        with Client(api=suite.api_address) as c:
            names = {c.create_job(queue, b"").name for _ in range(1000)}
        assert len(names) == 1000
        wait_for(lambda: len(records(record)) >= 1000, 120, "1000 executions")
        time.sleep(0.5)  # let any duplicate show up before counting
        counts = collections.Counter(r[0] for r in records(record))
        assert set(counts) == names
        assert max(counts.values()) == 1
        wait_for(
            lambda: (
                sql(
                    suite.database_url,
                    "SELECT count(*) FROM jobs WHERE queue = %s AND state = 'SUCCEEDED'",
                    queue,
                )[0][0]
                == 1000
            ),
            30,
            "all jobs SUCCEEDED",
        )
        assert sql(
            suite.database_url,
            "SELECT count(*), max(a.attempt) FROM attempts a JOIN jobs j ON j.id = a.job_id "
            "WHERE j.queue = %s",
            queue,
        )[0] == (1000, 1)
        # the dispatcher's Prometheus endpoint counted every claim and its dispatch lag
        disp = next(p for p in suite.procs if p.role == "dispatcher")
        scraped = scrape(disp.metrics_address)
        assert f'gnomon_claimed_attempts_total{{queue="{queue}"}} 1000.0' in scraped
        assert f'gnomon_dispatch_lag_seconds_count{{queue="{queue}"}} 1000.0' in scraped
        # every worker process took part (the dispatcher spreads assignments over streams with credits)
        assert {int(r[5]) for r in records(record)} == {w.popen.pid for w in workers}
    finally:
        for w in workers:
            suite.stop_proc(w)


def test_kill_9_between_claim_commit_and_delivery_redelivers_under_the_next_owner(
    pg_server, migrated_template, tmp_path
):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        dispatchers=0,
        env={
            "GNOMON_ETCD_LEASE_TTL_S": "2",
            "GNOMON_DISPATCHER_RELAY_INTERVAL_S": "0.5",
            "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.5",
        },
    ) as s:
        url = s.database_url

        record = str(tmp_path / "kill.txt")
        s.start()
        first = s.start_service("dispatcher", env={"GNOMON_FAULTS": "crash_after_claim"})
        from gnomon.cli.suite import wait_healthy

        wait_healthy(first.address)
        workers = start_workers(s, "kill", 1, record)
        with Client(api=s.api_address) as c:
            job = c.create_job("kill", b"x")
            # the dispatcher claims (once the worker is connected), commits, and SIGKILLs itself
            assert first.popen.wait(60) == -signal.SIGKILL
            j = c.get_job(job.name)
            assert j.state == "QUEUED" and j.attempt == 1
            job_id = job.name.rsplit("/", 1)[1]
            [(t1, state)] = sql(url, "SELECT token, state FROM attempts WHERE job_id = %s", job_id)
            assert state == "QUEUED" and records(record) == []  # in the outbox: claimed, not accepted
            second = s.start_service("dispatcher")
            done = wait_for(lambda: (x := c.get_job(job.name)).state == "SUCCEEDED" and x, 60, "re-delivery")
        assert done.attempt == 1  # the same attempt, re-delivered, not a retry
        [(t2, state)] = sql(url, "SELECT token, state FROM attempts WHERE job_id = %s", job_id)
        assert t2 > t1 and state == "SUCCEEDED"  # re-fenced under the new owner's larger token
        runs = [r for r in records(record) if r[0] == job.name]
        assert 1 <= len(runs) <= 2
        assert {r[2] for r in runs} == {job_id}  # same idempotency key every time
        assert second.popen.poll() is None
        for w in workers:
            s.stop_proc(w)
