"""Regression: a standby serving a failed region obeys that region's circuit breakers and retry budget.

Found in the structure review: the failover claim loop was built without the retry budget and the
breakers (their constructor defaults were ``None``), so during a failover the standby claimed OPEN
queues of the failed region and retried without limit. Two regions ``a`` and ``b`` (each standby for
the other); every process of ``a`` is killed -9; ``b`` serves ``a``. In region ``a``:

* queue ``brk`` has an OPEN breaker (open for an hour): its due jobs stay SCHEDULED, no attempt used,
  while jobs of queue ``x`` that fell due after them run on ``b``'s worker;
* queue ``rty`` fails every attempt; the budget allows 3 retries a minute (ratio 0, 0.05/s over
  60 s): after 3 retries the other due retries are pushed back by the budget's spacing (20 s).
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest

from gnomon.sdk import Client, RetryPolicy
from gnomon_test_support import running_suite, sql, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {
    "GNOMON_ETCD_LEASE_TTL_S": "3",
    "GNOMON_DISPATCHER_FAILOVER_AFTER_S": "2",
    "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.3",
    "GNOMON_BREAKER_OPEN_S": "3600",
    "GNOMON_BREAKER_EVAL_INTERVAL_S": "0.2",
    "GNOMON_BREAKER_MIN_RESULTS": "1000",  # the failing queue is braked by the budget alone
    "GNOMON_RETRY_BUDGET_RATIO": "0",
    "GNOMON_RETRY_BUDGET_MIN_PER_S": "0.05",
    "GNOMON_RETRY_BUDGET_WINDOW_S": "60",
}
ALLOWED_RETRIES = 3  # floor(max(0 * first attempts, 0.05/s * 60 s))


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(pg_server, migrated_template, tmp_path, regions=["a", "b"], env=ENV) as s:
        yield s


def ids(names: list[str]) -> list[str]:
    return [n.rsplit("/", 1)[1] for n in names]


def test_standby_obeys_the_failed_regions_breaker_and_retry_budget(suite):
    url = suite.database_url
    env = {"GNOMON_TEST_RECORD": os.path.join(suite.base_dir, "rec.txt"), "PYTHONPATH": TESTS_DIR}
    fail_file = os.path.join(suite.base_dir, "down")
    open(fail_file, "w").close()
    api_b = ["--api", suite.api_address_of("b")]
    workers = [
        suite.start_worker(["x", "brk"], "gnomon_test_handlers:record", env=env, extra=api_b),
        suite.start_worker(
            ["rty"],
            "gnomon_test_handlers:fail_while_file",
            env={**env, "GNOMON_TEST_FAIL_FILE": fail_file},
            extra=api_b,
        ),
    ]
    wait_for(
        lambda: sql(url, "SELECT owner_region FROM region_owners WHERE region = 'a'") == [("a",)], 20, "a"
    )
    # region a's breaker of queue brk is OPEN (and stays so for an hour)
    sql(
        url,
        "INSERT INTO queue_state (region, namespace, queue, state, version, opened_at, updated_at) "
        "VALUES ('a', 'default', 'brk', 'OPEN', 2, now(), now()) RETURNING 1",
    )
    with Client(api=suite.api_address_of("a")) as c:
        braked = [c.create_job("brk", b"").name for _ in range(5)]
        failing = [
            c.create_job(
                "rty", b"", max_attempts=10, retry_policy=RetryPolicy(initial_backoff=0.1, max_backoff=0.2)
            ).name
            for _ in range(10)
        ]
        control = [c.create_job("x", b"", delay=timedelta(seconds=1)).name for _ in range(5)]
        assert {c.get_job(n).region for n in braked + failing + control} == {"a"}
    for p in [p for p in suite.procs if p.region == "a" and p.role != "worker"]:
        os.kill(p.popen.pid, signal.SIGKILL)
        p.popen.wait()
    wait_for(
        lambda: sql(url, "SELECT owner_region FROM region_owners WHERE region = 'a'") == [("b",)],
        30,
        "region b to take over region a",
    )
    # the standby serves region a: the control jobs, due after the braked ones, run
    wait_for(
        lambda: (
            sql(
                url,
                "SELECT count(*) FROM jobs WHERE id::text = ANY(%s) AND state = 'SUCCEEDED'",
                ids(control),
            )
            == [(5,)]
        ),
        60,
        "region a's control jobs to run on the standby",
    )
    # the OPEN breaker (its jobs fell due before the control jobs): not one attempt of queue brk, its jobs wait SCHEDULED
    assert sql(url, "SELECT count(*) FROM attempts WHERE region = 'a' AND queue = 'brk'") == [(0,)]
    assert sql(
        url, "SELECT state, attempt, count(*) FROM jobs WHERE id::text = ANY(%s) GROUP BY 1, 2", ids(braked)
    ) == [("SCHEDULED", 0, 5)]
    # the retry budget: the due retries beyond the budget's 3 are pushed back by its spacing (20 s)
    wait_for(
        lambda: (
            sql(
                url,
                "SELECT count(*) FROM jobs WHERE id::text = ANY(%s) AND state = 'SCHEDULED' AND attempt >= 1 "
                "AND scheduled_at > now() + interval '10 seconds'",
                ids(failing),
            )[0][0]
            >= len(failing) - ALLOWED_RETRIES - 1
        ),
        60,
        "the standby to push back the retries beyond region a's retry budget",
    )
    retries = sql(url, "SELECT count(*) FROM attempts WHERE region = 'a' AND queue = 'rty' AND attempt > 1")[
        0
    ][0]
    assert retries <= ALLOWED_RETRIES
    for w in workers:
        suite.stop_proc(w)
