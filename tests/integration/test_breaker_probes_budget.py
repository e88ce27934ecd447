"""Regression: HALF_OPEN probes are not held back by an exhausted retry budget.

Found when the breaker end-to-end test hung in HALF_OPEN for its whole 35 s wait in a clean-clone
run: every due job of the failing queue was a retry, the retry budget (60 retries a minute by
default) was spent, so the claim took no probe and the breaker could not close until the budget
window slid. Here the budget is tiny (6 retries a minute) so that state is certain.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from gnomon.sdk import Client, RetryPolicy
from gnomon_test_support import running_suite, sql, wait_for

pytestmark = pytest.mark.integration
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPEN_S = 3


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        env={
            "GNOMON_BREAKER_WINDOW_S": "10",
            "GNOMON_BREAKER_MIN_RESULTS": "5",
            "GNOMON_BREAKER_FAILURE_RATIO": "0.5",
            "GNOMON_BREAKER_OPEN_S": str(OPEN_S),
            "GNOMON_BREAKER_PROBES": "2",
            "GNOMON_BREAKER_EVAL_INTERVAL_S": "0.2",
            "GNOMON_RETRY_BUDGET_RATIO": "0",
            "GNOMON_RETRY_BUDGET_MIN_PER_S": "0.1",
            "GNOMON_RETRY_BUDGET_WINDOW_S": "60",
        },
    ) as s:
        yield s


def test_half_open_probes_pass_an_exhausted_retry_budget(suite):
    fail_file = os.path.join(suite.base_dir, "down")
    open(fail_file, "w").close()
    w = suite.start_worker(
        ["prb"],
        "gnomon_test_handlers:fail_while_file",
        concurrency=20,  # credits for every job: all first attempts are claimed together
        env={
            "GNOMON_TEST_RECORD": os.path.join(suite.base_dir, "prb.txt"),
            "PYTHONPATH": TESTS_DIR,
            "GNOMON_TEST_FAIL_FILE": fail_file,
        },
    )
    try:
        # the breaker counts results from the moment the dispatcher first evaluates the queue (its
        # queue_state row): create the jobs after that, or a fast burst of failures may go uncounted
        wait_for(
            lambda: sql(suite.database_url, "SELECT count(*) FROM queue_state WHERE queue = 'prb'") == [(1,)],
            30,
            "the dispatcher to evaluate the queue's breaker",
        )
        with Client(api=suite.api_address) as c:
            policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.5)
            # one due time for all 20, so one claim takes every first attempt before the breaker can
            # open; otherwise a never-claimed job's first attempt could be a probe, and the test would
            # no longer be about retries held back by the budget (a clean-clone run saw that)
            due = datetime.now(UTC) + timedelta(seconds=1.5)
            for _ in range(20):
                c.create_job("prb", b"", schedule_time=due, max_attempts=30, retry_policy=policy)
            wait_for(lambda: c.get_queue("prb").breaker_state == "OPEN", 30, "breaker OPEN")
            wait_for(
                lambda: (q := c.get_queue("prb")).retry_budget.used >= q.retry_budget.allowed,
                30,
                "the retry budget to be spent",
            )
            first = sql(suite.database_url, "SELECT count(DISTINCT job_id) FROM attempts WHERE queue = 'prb'")
            assert first == [(20,)]  # every job failed once: whatever is due now is a retry
            os.remove(fail_file)  # the dependency recovers
            wait_for(
                lambda: c.get_queue("prb").breaker_state == "HALF_OPEN", OPEN_S + 10, "breaker HALF_OPEN"
            )
            half_open = time.monotonic()
            wait_for(
                lambda: c.get_queue("prb").breaker_state == "CLOSED", 15, "breaker CLOSED (probes claimed)"
            )
            assert time.monotonic() - half_open < 15  # well inside the 60 s budget window
        probes = sql(
            suite.database_url,
            "SELECT count(*) FROM attempts WHERE queue = 'prb' AND attempt > 1 AND state = 'SUCCEEDED'",
        )[0][0]
        assert probes >= 2  # the probes were retries, and they ran
    finally:
        suite.stop_proc(w)
