"""Fault scenarios 1 and 4 with the history checker (tests/faults/history.py):

1. kill -9 of a dispatcher in the middle of a claim transaction (written, not committed): the claim
   rolls back, the surviving dispatcher takes the shards over and every job runs; (the kill between
   claim commit and delivery is tests/integration/test_dispatch_e2e.py).
4. PostgreSQL restarted with ``-m immediate`` while jobs are created, claimed and run: every job the
   API acknowledged is run, none is lost, none early, duplicates only where the protocol allows.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client, GnomonError
from gnomon_test_support import running_suite, sql, wait_for

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history import History, check, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.faults]
SEED = int(os.environ.get("GNOMON_TEST_FAULT_SEED", "7"))
ROUNDS = int(os.environ.get("GNOMON_TEST_FAULT_ROUNDS", "1"))


def _all_terminal(url: str, h: History) -> bool:
    ids = [str(c.job_id) for c in h.created_jobs]
    return sql(
        url,
        "SELECT count(*) FROM jobs WHERE id::text = ANY(%s) AND state IN "
        "('SUCCEEDED','DEAD','CANCELLED','EXPIRED')",
        ids,
    ) == [(len(ids),)]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_dispatcher_killed_mid_claim_loses_nothing(pg_server, migrated_template, tmp_path, round_):
    rng = random.Random(SEED + round_)
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        env={"GNOMON_ETCD_LEASE_TTL_S": "3", "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.3"},
    ) as s:
        url = s.database_url
        doomed = s.start_service("dispatcher", env={"GNOMON_FAULTS": "crash_mid_claim"})
        wait_healthy(doomed.address)
        wait_for(lambda: sql(url, "SELECT count(DISTINCT owner) FROM shard_owners") == [(2,)], 20, "2 owners")
        record = str(tmp_path / "mid.txt")
        h = History()
        w = s.start_worker(["mid"], "history:run", env=worker_env(record))
        with Client(api=s.api_address) as c:
            for _ in range(60):
                h.created(c.create_job("mid", b"{}", delay=timedelta(seconds=rng.uniform(0.5, 2.0))))
        wait_for(
            lambda: doomed.popen.poll() is not None, 30, "the doomed dispatcher to kill itself mid-claim"
        )
        assert doomed.popen.returncode == -9
        wait_for(lambda: _all_terminal(url, h), 60, "every job to finish")
        s.stop_proc(w)
        report = check(h.collect(url, record))
        assert report.ok, report
        # the doomed claim never committed: no attempt carries its dispatcher id
        assert sql(
            url, "SELECT count(*) FROM attempts WHERE dispatcher_id LIKE %s", f"%-{doomed.popen.pid}-%"
        ) == [(0,)]


def test_postgres_immediate_restart_under_load(tmp_path):
    rng = random.Random(SEED)
    # the suite owns its PostgreSQL (in its own temp dir, traversable by the postgres OS user)
    with running_suite(
        None, None, tmp_path, start=False, env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1"}
    ) as s:
        record = str(tmp_path / "pg.txt")
        h, errors, stop = History(), [], threading.Event()
        try:
            s.start()
            url = s.database_url
            w = s.start_worker(["pg"], "history:run", concurrency=32, env=worker_env(record))

            def produce():
                # A create that fails (UNAVAILABLE, or DEADLINE_EXCEEDED when the client gives up
                # first) may still have committed: the outcome is ambiguous, so the client retries the
                # same request (request_id, same fields) until it is acknowledged, as docs/api.md
                # advises; the history then knows every job that exists.
                pending: tuple[str, float] | None = None
                with Client(api=s.api_address, timeout=5) as c:
                    while not stop.is_set() or pending is not None:
                        rid, delay = pending or (str(uuid.uuid4()), rng.uniform(0, 1))
                        try:
                            h.created(
                                c.create_job(
                                    "pg", b'{"sleep": 0.2}', delay=timedelta(seconds=delay), request_id=rid
                                )
                            )
                            pending = None
                        except GnomonError as e:  # refused while the database is down
                            errors.append(e.code.name)
                            pending = (rid, delay)
                            time.sleep(0.05)  # the load's pace while refused, not a wait

            t = threading.Thread(target=produce)
            t.start()
            wait_for(lambda: len(h.created_jobs) >= 100, 30, "load before the restart")
            s.pg.stop_server("immediate")
            time.sleep(1.5)  # the behaviour under test: the database stays down this long under load
            s.pg.start_again()
            wait_for(lambda: len(h.created_jobs) >= 250, 60, "load after the restart")
            stop.set()
            t.join(30)
            wait_for(lambda: _all_terminal(url, h), 90, "every acknowledged job to finish")
            s.stop_proc(w)
            report = check(h.collect(url, record))
            assert report.ok, report
            assert errors and set(errors) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}  # refused, not lost
        finally:
            stop.set()
