"""OpenTelemetry metrics scraped from every service's Prometheus endpoint (``Proc.metrics_address``):
real ``gnomon api/dispatcher/planner/reaper/worker`` processes, a real PostgreSQL and etcd.

Names checked are the ones docs/operations.md ("Metrics (Prometheus)") documents.
"""

from __future__ import annotations

import os
import signal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gnomon.sdk import Client
from gnomon_test_support import records, running_suite, sql, wait_for
from gnomon_test_support import scrape as scrape_text

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("suite"),
        env={
            "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1",
            "GNOMON_METRICS_BACKLOG_INTERVAL_S": "0.3",
            "GNOMON_REAPER_INTERVAL_S": "0.2",
            "GNOMON_REAPER_SKEW_MARGIN_S": "0.5",
        },
    ) as s:
        yield s


def scrape(proc) -> dict[tuple[str, frozenset], float]:
    """``(sample name, labels) -> value`` of one process's ``/metrics``."""
    text = scrape_text(proc.metrics_address)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def names(samples) -> set[str]:
    return {n for n, _ in samples}


def proc(suite, role):
    return next(p for p in suite.procs if p.role == role)


def worker(suite, queue, handler, record, concurrency=8):
    return suite.start_worker(
        [queue],
        f"gnomon_test_handlers:{handler}",
        concurrency=concurrency,
        env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR},
    )


def test_every_service_serves_metrics(suite):
    for p in suite.procs:
        if p.role == "worker":
            continue
        assert p.metrics_address, p.role
        got = scrape(p)
        assert value(got, "gnomon_fenced_writes_total") == 0.0, p.role  # label-less counters start at 0
        assert value(got, "gnomon_expired_jobs_total") == 0.0, p.role
    disp = scrape(proc(suite, "dispatcher"))
    assert value(disp, "gnomon_owned_shards") > 0
    assert value(disp, "gnomon_in_flight_attempts") == 0


def test_dispatch_publication_and_throttling_metrics(suite):
    ok_rec = os.path.join(suite.work_dir, "m_ok.txt")
    thr_rec = os.path.join(suite.work_dir, "m_thr.txt")
    workers = [
        worker(suite, "m_ok", "record", ok_rec),
        worker(suite, "m_thr", "throttle_first_attempt", thr_rec),
    ]
    try:
        with Client(api=suite.api_address) as c:
            for _ in range(20):
                c.create_job("m_ok", b"")
            for _ in range(3):
                c.create_job("m_thr", b"")
        wait_for(
            lambda: (
                sql(
                    suite.database_url,
                    "SELECT count(*) FROM jobs WHERE queue IN ('m_ok', 'm_thr') AND state = 'SUCCEEDED'",
                )[0][0]
                == 23
            ),
            60,
            "all jobs SUCCEEDED",
        )
        assert len(records(ok_rec)) == 20 and len(records(thr_rec)) == 6  # throttled once, then succeeded
        d = proc(suite, "dispatcher")
        got = wait_for(
            lambda: (g := scrape(d)) and value(g, "gnomon_in_flight_attempts") == 0 and g,
            10,
            "in-flight back to 0",
        )
        assert value(got, "gnomon_claimed_attempts_total", queue="m_ok") == 20
        assert value(got, "gnomon_dispatch_lag_seconds_count", queue="m_ok") == 20
        assert value(got, "gnomon_dispatch_lag_seconds_count", queue="m_thr") == 6
        assert 0 <= value(got, "gnomon_dispatch_lag_seconds_sum", queue="m_ok") < 20 * 10
        # every attempt was accepted (its outbox row published) exactly once
        assert value(got, "gnomon_outbox_publication_lag_seconds_count", queue="m_ok") == 20
        assert value(got, "gnomon_outbox_publication_lag_seconds_count", queue="m_thr") == 6
        assert 0 <= value(got, "gnomon_outbox_publication_lag_seconds_sum", queue="m_ok") < 20 * 10
        assert value(got, "gnomon_throttled_results_total", namespace="default", queue="m_thr") == 3
        assert value(got, "gnomon_throttled_results_total", namespace="default", queue="m_ok") is None
        assert value(got, "gnomon_fenced_writes_total") == 0
        assert value(got, "gnomon_connected_worker_streams") == 2
        # served queues with nothing due
        got = wait_for(
            lambda: (
                (g := scrape(d))
                and value(g, "gnomon_queue_depth", namespace="default", queue="m_ok") == 0
                and g
            ),
            10,
            "queue depth 0",
        )
        assert value(got, "gnomon_queue_oldest_due_age_seconds", namespace="default", queue="m_ok") == 0
    finally:
        for w in workers:
            suite.stop_proc(w)


def test_backlog_in_flight_and_lease_expiry_metrics(suite):
    """One worker with one credit hangs in attempt 1 of the first job: the next 5 due jobs wait
    (queue depth 5, oldest due age growing, 1 attempt in flight); SIGKILL of the worker lets the
    lease expire and the reaper count it."""
    rec = os.path.join(suite.work_dir, "m_held.txt")
    w = worker(suite, "m_held", "hang_on_first_attempt", rec, concurrency=1)
    d, reaper = proc(suite, "dispatcher"), proc(suite, "reaper")
    with Client(api=suite.api_address) as c:
        first = c.create_job("m_held", b"", lease_duration=2, idempotent=True)
        wait_for(lambda: c.get_job(first.name).state == "RUNNING", 30, "first job running")
        for _ in range(5):
            c.create_job("m_held", b"", idempotent=True)

        def backlog():
            g = scrape(d)
            return (
                value(g, "gnomon_queue_depth", namespace="default", queue="m_held") == 5
                and value(g, "gnomon_queue_oldest_due_age_seconds", namespace="default", queue="m_held") > 0.3
                and g
            )

        got = wait_for(backlog, 15, "queue depth 5 with an aging oldest due job")
        assert value(got, "gnomon_in_flight_attempts") == 1
        assert (
            sql(
                suite.database_url,
                "SELECT count(*) FROM jobs WHERE queue = 'm_held' AND state = 'SCHEDULED' "
                "AND scheduled_at <= now()",
            )[0][0]
            == 5
        )

        w.popen.send_signal(signal.SIGKILL)
        w.popen.wait(10)
        got = wait_for(
            lambda: (g := scrape(reaper)) and value(g, "gnomon_leases_lost_total", outcome="SCHEDULED") and g,
            30,
            "the reaper to count the lost lease",
        )
        assert value(got, "gnomon_leases_lost_total", outcome="SCHEDULED") == 1
        # the queue is no longer served by this dispatcher's workers: its gauges go away
        wait_for(
            lambda: value(scrape(d), "gnomon_queue_depth", namespace="default", queue="m_held") is None,
            10,
            "queue gauges dropped",
        )
        assert value(scrape(d), "gnomon_in_flight_attempts") == 0
