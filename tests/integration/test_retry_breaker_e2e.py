"""Retry policy and the per-queue circuit breaker end to end, through real processes (api,
dispatcher, planner, reaper, workers; PostgreSQL, etcd), with short breaker settings.

Timing assertions are only those the mechanism guarantees by the database clock: nothing is
claimed from an OPEN queue (a claim statement re-reads the breaker state; 1 s of slack covers a
claim transaction that began before the OPEN commit), a THROTTLED retry is never claimed before
its retry_after passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from gnomon.sdk import Client, RetryPolicy
from gnomon_test_support import records, running_suite, sql, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


OPEN_S = 5
PROBES = 3


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("suite"),
        env={
            "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1",
            "GNOMON_BREAKER_WINDOW_S": "10",
            "GNOMON_BREAKER_MIN_RESULTS": "10",
            "GNOMON_BREAKER_FAILURE_RATIO": "0.5",
            "GNOMON_BREAKER_OPEN_S": str(OPEN_S),
            "GNOMON_BREAKER_PROBES": str(PROBES),
            "GNOMON_BREAKER_EVAL_INTERVAL_S": "0.2",
        },
    ) as s:
        yield s


def worker(suite, queue, handler, record, concurrency=8, **env):
    return suite.start_worker(
        [queue],
        f"gnomon_test_handlers:{handler}",
        concurrency=concurrency,
        env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR, **env},
    )


def attempts_of(suite, job_name):
    return sql(
        suite.database_url,
        "SELECT attempt, state, failure_class, claimed_at, finished_at FROM attempts "
        "WHERE job_id = %s ORDER BY attempt",
        job_name.rsplit("/", 1)[1],
    )


def test_breaker_opens_stops_dispatch_then_half_opens_and_closes(suite):
    record = os.path.join(suite.work_dir, "brk.txt")
    fail_file = os.path.join(suite.work_dir, "brk.down")
    open(fail_file, "w").close()
    w = worker(suite, "brk", "fail_while_file", record, GNOMON_TEST_FAIL_FILE=fail_file)
    try:
        with Client(api=suite.api_address) as c:
            assert c.get_queue("brk").breaker_state == "CLOSED"
            policy = RetryPolicy(initial_backoff=0.2, max_backoff=1.0)
            names = [c.create_job("brk", b"", max_attempts=30, retry_policy=policy).name for _ in range(40)]
            q = wait_for(lambda: (x := c.get_queue("brk")).breaker_state == "OPEN" and x, 30, "breaker OPEN")
            assert q.opened_time is not None and q.failure_ratio >= 0.5 and q.window_results >= 10
            # while OPEN, failed jobs wait SCHEDULED: their backoff (<= 1 s) ends, nothing claims them
            waiting = wait_for(
                lambda: (x := c.get_queue("brk")).due_jobs > 0 and x, OPEN_S, "due jobs while OPEN"
            )
            assert waiting.breaker_state == "OPEN" and waiting.oldest_due_age is not None
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gnomon.cli.main",
                    "queue",
                    "get",
                    "brk",
                    "--json",
                    "--api",
                    suite.api_address,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["name"] == "namespaces/default/queues/brk"
            os.remove(fail_file)  # the dependency recovers
            wait_for(lambda: c.get_queue("brk").breaker_state == "CLOSED", OPEN_S + 30, "breaker CLOSED")
            wait_for(lambda: all(c.get_job(n).state == "SUCCEEDED" for n in names), 60, "all jobs SUCCEEDED")
        [(state, version, opened_at, closed_at, opened_count)] = sql(
            suite.database_url,
            "SELECT state, version, opened_at, updated_at, opened_count FROM queue_state "
            "WHERE namespace = 'default' AND queue = 'brk'",
        )
        assert (state, version, opened_count) == ("CLOSED", 4, 1)  # CLOSED -> OPEN -> HALF_OPEN -> CLOSED
        assert opened_at == q.opened_time
        during_open = sql(
            suite.database_url,
            "SELECT count(*) FROM attempts WHERE queue = 'brk' AND claimed_at > %s AND claimed_at < %s",
            opened_at + timedelta(seconds=1),
            opened_at + timedelta(seconds=OPEN_S),
        )[0][0]
        assert during_open == 0  # no attempt claimed while OPEN
        probes = sql(
            suite.database_url,
            "SELECT count(*) FROM attempts WHERE queue = 'brk' AND claimed_at >= %s AND claimed_at < %s",
            opened_at + timedelta(seconds=OPEN_S),
            closed_at,
        )[0][0]
        assert 1 <= probes <= PROBES  # HALF_OPEN let only the probes through
        log = Path(next(p.log_path for p in suite.procs if p.role == "dispatcher")).read_text()
        for change in ("CLOSED -> OPEN", "OPEN -> HALF_OPEN", "HALF_OPEN -> CLOSED"):
            assert f"queue default/brk: {change}" in log
    finally:
        suite.stop_proc(w)


def test_permanent_and_non_retryable_failures_go_dead_after_exactly_one_attempt(suite):
    record = os.path.join(suite.work_dir, "perm.txt")
    workers = [
        worker(suite, "perm", "permanent_failure", record),
        worker(suite, "valerr", "value_error", record),
    ]
    try:
        with Client(api=suite.api_address) as c:
            perm = c.create_job("perm", b"", max_attempts=5)
            typed = c.create_job(
                "valerr", b"", max_attempts=5, retry_policy={"non_retryable_errors": ["ValueError"]}
            )
            assert typed.retry_policy.non_retryable_errors == ("ValueError",)
            for job in (perm, typed):
                done = wait_for(
                    lambda job=job: (j := c.get_job(job.name)).state == "DEAD" and j, 30, f"{job.name} DEAD"
                )
                assert done.attempt == 1
            assert c.get_job(typed.name).last_error == "ValueError: invalid literal"
        time.sleep(1.0)  # a wrongly scheduled retry (backoff <= 1 s) would show up now
        assert [a[:3] for a in attempts_of(suite, perm.name)] == [(1, "FAILED", "PERMANENT")]
        assert [a[:3] for a in attempts_of(suite, typed.name)] == [(1, "FAILED", "TRANSIENT")]
        assert sorted(r[0] for r in records(record)) == sorted([perm.name, typed.name])
    finally:
        for w in workers:
            suite.stop_proc(w)


def test_throttled_retry_waits_for_retry_after(suite):
    record = os.path.join(suite.work_dir, "thr.txt")
    w = worker(suite, "thr", "throttle_first_attempt", record)
    try:
        with Client(api=suite.api_address) as c:
            job = c.create_job("thr", b"", retry_policy=RetryPolicy(initial_backoff=0, max_backoff=0.1))
            done = wait_for(
                lambda job=job: (j := c.get_job(job.name)).state == "SUCCEEDED" and j, 60, "job SUCCEEDED"
            )
        assert done.attempt == 2
        (a1, s1, f1, _, fin1), (a2, s2, _, claimed2, _) = attempts_of(suite, job.name)
        assert (a1, s1, f1, a2, s2) == (1, "FAILED", "THROTTLED", 2, "SUCCEEDED")
        assert claimed2 - fin1 >= timedelta(seconds=2)  # retry_after honoured (DB timestamps)
        assert claimed2 - fin1 < timedelta(seconds=30)  # and not lost
    finally:
        suite.stop_proc(w)
