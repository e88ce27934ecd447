"""Three dispatchers, workers connected unevenly (ADR 0003: the SDK connects to every dispatcher of
its region): every shard's jobs reach the workers whichever dispatcher owns them, exactly once."""

from __future__ import annotations

import collections
import os
import time

import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client
from gnomon_test_support import records, running_suite, sql, wait_for

pytestmark = pytest.mark.integration
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        dispatchers=1,
        env={"GNOMON_DISPATCHER_SHARD_SCAN_S": "0.2"},
    ) as s:
        yield s


def _streams(metrics_address: str) -> float:
    """The dispatcher's gnomon_connected_worker_streams gauge (0 if not scraped yet)."""
    from gnomon_test_support import scrape

    try:
        text = scrape(metrics_address, timeout_s=2)
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("gnomon_connected_worker_streams"):
            return float(line.split()[-1])
    return 0


def test_uneven_workers_get_jobs_of_every_shard_from_three_dispatchers(suite):
    record = os.path.join(suite.base_dir, "uneven.txt")
    env = {"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR, "GNOMON_TEST_SLEEP_S": "0.05"}
    # a big worker connects while there is one dispatcher; two more dispatchers join later
    big = suite.start_worker(["uneven"], "gnomon_test_handlers:record_then_sleep", concurrency=32, env=env)
    for _ in range(2):
        wait_healthy(suite.start_service("dispatcher").address)
    started = time.monotonic()
    wait_for(
        lambda: sql(suite.database_url, "SELECT count(DISTINCT owner) FROM shard_owners") == [(3,)],
        30,
        "shards rebalanced over 3 dispatchers",
    )
    handover_s = time.monotonic() - started
    small = suite.start_worker(["uneven"], "gnomon_test_handlers:record_then_sleep", concurrency=1, env=env)
    dispatchers = [p for p in suite.procs if p.role == "dispatcher"]
    wait_for(
        lambda: all(_streams(p.metrics_address) == 2 for p in dispatchers),
        30,
        "both workers connected to all three dispatchers",
    )
    try:
        with Client(api=suite.api_address) as c:
            names = {c.create_job("uneven", b"").name for _ in range(300)}
        wait_for(lambda: len(records(record)) >= 300, 90, "300 executions")
        time.sleep(0.5)  # an observation window: a duplicate execution would show up in it
        counts = collections.Counter(r[0] for r in records(record))
        assert set(counts) == names and set(counts.values()) == {1}  # every job once
        per_dispatcher = dict(
            sql(suite.database_url, "SELECT dispatcher_id, count(*) FROM attempts GROUP BY 1")
        )
        assert len(per_dispatcher) == 3 and min(per_dispatcher.values()) > 0  # jobs came from all three
        shards = {
            r[0] for r in sql(suite.database_url, "SELECT DISTINCT shard FROM jobs WHERE queue = 'uneven'")
        }
        assert len(shards) > 50  # spread over (almost) all 64 shards
        pids = collections.Counter(r[5] for r in records(record))
        assert set(pids) == {str(big.popen.pid), str(small.popen.pid)}  # both workers ran jobs
        assert handover_s < 15
    finally:
        suite.stop_proc(small)
        suite.stop_proc(big)
