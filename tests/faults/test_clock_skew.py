"""Fault scenario 6: dispatchers and the reaper with wall clocks skewed by +30 s and -30 s
(libfaketime, LD_PRELOAD). Nothing is dispatched early and no lease is judged expired early,
because every time-sensitive decision uses the database clock (docs/guarantees.md#clocks)."""

from __future__ import annotations

import collections
import os
from datetime import timedelta
from pathlib import Path

import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client
from gnomon_test_support import records, running_suite, sql, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def skewed(offset: str) -> dict:
    """Environment running a process with its wall clock moved by ``offset`` (e.g. ``+30s``)."""
    import libfaketime

    lib = Path(libfaketime.__file__).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    assert lib.exists(), lib
    return {
        "LD_PRELOAD": str(lib),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1", "GNOMON_REAPER_INTERVAL_S": "0.5"},
    ) as s:
        yield s


def test_skewed_dispatchers_and_reaper_never_dispatch_early_nor_expire_leases_early(suite):
    # replace the dispatcher and the reaper by skewed ones: one dispatcher 30 s ahead, one 30 s behind
    for p in [p for p in suite.procs if p.role in ("dispatcher", "reaper")]:
        suite.stop_proc(p)
    ahead = suite.start_service("dispatcher", env=skewed("+30s"))
    behind = suite.start_service("dispatcher", env=skewed("-30s"))
    reaper = suite.start_service("reaper", env=skewed("+30s"))
    for p in (ahead, behind, reaper):
        wait_healthy(p.address)
    out = sql(suite.database_url, "SELECT now()")[0][0]
    record = os.path.join(suite.base_dir, "skew.txt")
    worker = suite.start_worker(
        ["skew"],
        "gnomon_test_handlers:record_then_sleep",
        concurrency=64,
        env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR, "GNOMON_TEST_SLEEP_S": "6"},
    )
    try:
        with Client(api=suite.api_address) as c:
            names = [
                c.create_job(
                    "skew", b"", delay=timedelta(seconds=3), lease_duration=timedelta(seconds=3)
                ).name
                for _ in range(40)
            ]
            wait_for(lambda: all(c.get_job(n).state == "SUCCEEDED" for n in names), 60, "40 jobs to succeed")
        rows = sql(
            suite.database_url,
            "SELECT j.scheduled_at, a.claimed_at, a.dispatcher_id, a.state, j.attempt "
            "FROM jobs j JOIN attempts a ON a.job_id = j.id WHERE j.queue = 'skew'",
        )
        assert len(rows) == 40  # one attempt each: no lease judged lost
        assert all(claimed >= sched for sched, claimed, *_ in rows)  # never early, by the database clock
        assert all(state == "SUCCEEDED" and attempt == 1 for *_, state, attempt in rows)
        assert {d for _, _, d, *_ in rows} <= {d for d in {r[2] for r in rows}}
        starts = {r[0]: float(r[4]) for r in records(record)}  # the worker's (true) wall clock
        sched = {
            f"namespaces/default/jobs/{i}": s.timestamp()
            for i, s in sql(suite.database_url, "SELECT id, scheduled_at FROM jobs WHERE queue = 'skew'")
        }
        assert all(starts[n] >= sched[n] - 0.05 for n in names)  # never started before its time
        lags = [(claimed - s).total_seconds() for s, claimed, *_ in rows]
        assert max(lags) < 5.0  # and not held back by the skew either
        assert collections.Counter(r[0] for r in records(record)) == collections.Counter(names)
        assert out is not None
    finally:
        suite.stop_proc(worker)
