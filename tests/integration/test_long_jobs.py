"""Long jobs through real processes: renewable leases and progress checkpoints
(docs/api.md#progress-checkpoints).

* A job with a 2 s lease runs for 30 s (fifteen leases) and survives on heartbeats alone: one attempt, SUCCEEDED.
* A worker that stops heartbeating (SIGSTOP for longer than lease + reaper skew margin, then
  SIGCONT) loses its attempts: the reaper marks attempt 1 LOST by the database clock; after SIGCONT
  the SDK finds its local lease gone, cancels the handler (reason ``lease_lost``) and drops the
  attempt without reporting a result; the idempotent job is retried -- resuming from the checkpoint
  attempt 1 saved -- and the non-idempotent one goes to the DLQ (DEAD).

The handler is ``gnomon_effect_handlers.long_steps`` (records each start, step and end).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from gnomon.sdk import Client, FailureClass
from gnomon_test_support import FAST_REAPING, records, running_suite, sql, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS_DIR)
HANDLER = "gnomon_effect_handlers:long_steps"
LEASE_S = 2


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("long"),
        env=FAST_REAPING,
    ) as s:
        yield s


def worker_env(record: str) -> dict:
    return {"GNOMON_TEST_RECORD": record, "PYTHONPATH": os.pathsep.join([ROOT, TESTS_DIR])}


def job_id(name: str) -> str:
    return name.rsplit("/", 1)[1]


@pytest.fixture(scope="module")
def long_job(suite):
    """A 30 s job (2 s lease: fifteen leases long) on its own worker, started before the pause test below so that the two
    overlap (the pause stops another worker process; this one must not notice)."""
    record = os.path.join(suite.work_dir, "long.txt")
    suite.start_worker(["long"], HANDLER, concurrency=2, env=worker_env(record))
    with Client(api=suite.api_address) as c:
        job = c.create_job("long", {"steps": 60, "step_s": 0.5}, lease_duration=LEASE_S, idempotent=False)
    return job.name, record


def test_worker_paused_past_its_lease_loses_the_attempt_and_drops_it_without_a_result(suite, long_job):
    record = os.path.join(suite.work_dir, "paused.txt")
    w = suite.start_worker(["pause"], HANDLER, concurrency=4, env=worker_env(record), extra=["--verbose"])
    payload = {"steps": 6, "step_s": 1.0}
    with Client(api=suite.api_address) as c:
        retried = c.create_job("pause", payload, lease_duration=LEASE_S, idempotent=True, max_attempts=3)
        dead = c.create_job("pause", payload, lease_duration=LEASE_S, idempotent=False, max_attempts=3)
        ids = [job_id(retried.name), job_id(dead.name)]
        # both running, each with a checkpoint saved through the heartbeat path
        wait_for(
            lambda: (
                sql(
                    suite.database_url,
                    "SELECT count(*) FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.attempt = j.attempt "
                    "WHERE j.id = ANY(%s::uuid[]) AND a.state = 'RUNNING' AND j.checkpoint IS NOT NULL",
                    ids,
                )[0][0]
                == 2
            ),
            30,
            "both jobs running with a checkpoint",
        )
        w.popen.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            wait_for(
                lambda: (
                    sql(
                        suite.database_url,
                        "SELECT count(*) FROM attempts WHERE job_id = ANY(%s::uuid[]) "
                        "AND attempt = 1 AND state = 'LOST'",
                        ids,
                    )[0][0]
                    == 2
                ),
                30,
                "the reaper to declare both leases lost",
            )
            assert time.monotonic() - stopped_at > LEASE_S  # not before the lease could have ended
        finally:
            w.popen.send_signal(signal.SIGCONT)
        done = wait_for(lambda: (j := c.get_job(retried.name)).terminal and j, 60, "the retry to finish")
        gone = wait_for(lambda: (j := c.get_job(dead.name)).terminal and j, 30, "the other job to end")
        wait_for(
            lambda: sum(1 for r in records(record) if r[0] == "cancelled") == 2,
            30,
            "both paused handlers to see the cancellation",
        )
        h_retried, h_dead = c.list_job_attempts(retried.name), c.list_job_attempts(dead.name)

    # the database: attempt 1 LOST (by the reaper, never by a result), then the flag decides
    assert (done.state, done.attempt) == ("SUCCEEDED", 2)
    assert [(a.attempt, a.state, a.failure_class) for a in h_retried] == [
        (1, "LOST", FailureClass.AMBIGUOUS),
        (2, "SUCCEEDED", None),
    ]
    assert (gone.state, gone.attempt, gone.failure_class) == ("DEAD", 1, FailureClass.AMBIGUOUS)
    assert [(a.attempt, a.state) for a in h_dead] == [(1, "LOST")]
    assert "outcome unknown" in h_dead[0].error  # the reaper's text, not a worker's result

    # the SDK: after SIGCONT the handlers were cancelled for lease loss and the attempts dropped unreported
    recs = records(record)
    assert sorted((r[1], r[2], r[3]) for r in recs if r[0] == "cancelled") == sorted(
        [(retried.name, "1", "lease_lost"), (dead.name, "1", "lease_lost")]
    )
    with open(w.log_path) as f:
        log = f.read()
    for name in (retried.name, dead.name):
        assert f"dropped   {name} attempt 1" in log
        assert f"finished  {name} attempt 1" not in log and f"failed    {name} attempt 1" not in log
    assert "could not be renewed in time" in log

    # the retry resumed from the checkpoint attempt 1 saved, instead of from the start
    [start2] = [r for r in recs if r[0] == "start" and r[1] == retried.name and r[2] == "2"]
    steps1 = [int(r[3]) for r in recs if r[0] == "step" and r[1] == retried.name and r[2] == "1"]
    assert start2[4] != "-" and 1 <= int(start2[4]) <= max(steps1)
    assert w.popen.poll() is None  # the worker itself lived on


@pytest.mark.timeout(240)
def test_a_job_longer_than_its_lease_survives_on_heartbeats(suite, long_job):
    name, record = long_job
    with Client(api=suite.api_address) as c:
        done = wait_for(lambda: (j := c.get_job(name)).terminal and j, 150, "the 30 s job to finish", 0.2)
        history = c.list_job_attempts(name)
    assert (done.state, done.attempt) == ("SUCCEEDED", 1)
    assert [(a.attempt, a.state) for a in history] == [(1, "SUCCEEDED")]
    [(ran_s, checkpoint)] = sql(
        suite.database_url,
        "SELECT extract(epoch FROM finished_at - started_at), checkpoint FROM jobs WHERE id = %s",
        job_id(name),
    )
    assert ran_s >= 30  # fifteen leases long, by the database clock
    # checkpoints were saved all along (the last one or two may not travel: they ride on heartbeats)
    assert json.loads(bytes(checkpoint))["done"] >= 55
    recs = [r for r in records(record) if r[1] == name]
    assert [r[0] for r in recs if r[0] != "step"] == ["start", "done"]  # never cancelled, never restarted
