"""Every metric that deploy/prometheus/gnomon-rules.yaml and deploy/grafana/gnomon-dashboard.json name is
exported by a running suite (real ``gnomon api/dispatcher/planner/reaper/worker`` processes, PostgreSQL
and etcd): a little work of every kind (successes, a throttled result, failures that open a
breaker, a lease lost by a killed worker) makes the labelled series appear, then every service's
``/metrics`` is scraped over HTTPS. Also checks the values of the two metrics added for the alerts,
``gnomon_dead_letters_total`` and ``gnomon_planner_lag_seconds``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gnomon.sdk import Client
from gnomon_deploy_support import dashboard_expressions, metric_names, rule_expressions
from gnomon_test_support import records, running_suite, scrape, sql, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


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
            "GNOMON_BREAKER_MIN_RESULTS": "3",  # dm_flaky's 3 failures open it; dm_thr's 2 results do not
            "GNOMON_BREAKER_OPEN_S": "300",
            "GNOMON_BREAKER_EVAL_INTERVAL_S": "0.2",
        },
    ) as s:
        yield s


def worker(suite, queue: str, handler: str, concurrency: int = 4):
    """A worker process for ``queue`` running ``gnomon_test_handlers:<handler>``; returns (proc, record file)."""
    rec = os.path.join(suite.work_dir, f"{queue}.txt")
    w = suite.start_worker(
        [queue],
        f"gnomon_test_handlers:{handler}",
        concurrency=concurrency,
        env={"GNOMON_TEST_RECORD": rec, "PYTHONPATH": TESTS_DIR},
    )
    return w, rec


def exported(suite) -> tuple[dict[str, dict], set[str]]:
    """``(role -> {(sample name, labels): value}, histogram family names)`` of every service."""
    samples: dict[str, dict] = {}
    histograms: set[str] = set()
    for p in suite.procs:
        if p.role == "worker":
            continue
        got = samples.setdefault(p.role, {})
        for fam in text_string_to_metric_families(scrape(p.metrics_address)):
            if fam.type == "histogram":
                histograms.add(fam.name)
            for s in fam.samples:
                got[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, histograms


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(suite):
    named = metric_names(rule_expressions()) | metric_names(dashboard_expressions())
    # the parse found what the alerts are about (so an empty or broken parse cannot pass)
    assert {
        "gnomon_dispatch_lag_seconds_bucket",
        "gnomon_queue_oldest_due_age_seconds",
        "gnomon_breaker_open",
        "gnomon_dead_letters_total",
        "gnomon_fenced_writes_total",
        "gnomon_leases_lost_total",
        "gnomon_planner_lag_seconds",
    } <= named

    ok, ok_rec = worker(suite, "dm_ok", "record")
    thr, thr_rec = worker(suite, "dm_thr", "throttle_first_attempt")
    flaky, flaky_rec = worker(suite, "dm_flaky", "value_error")
    held, _ = worker(suite, "dm_held", "hang_on_first_attempt", concurrency=1)
    try:
        dispatcher = next(p for p in suite.procs if p.role == "dispatcher")
        wait_for(
            lambda: "gnomon_connected_worker_streams 4.0" in scrape(dispatcher.metrics_address),
            30,
            "4 worker streams connected",
        )
        with Client(api=suite.api_address) as c:
            lost = c.create_job("dm_held", b"", lease_duration=2)  # not idempotent: a lost lease -> DEAD
            for _ in range(5):
                c.create_job("dm_ok", b"")
            c.create_job("dm_thr", b"")
            for _ in range(3):  # TRANSIENT failures with no retry left: dead letters, and the breaker opens
                # due in 1 s: the breaker (evaluated every 0.2 s) has its queue_state row by then
                c.create_job("dm_flaky", b"", max_attempts=1, delay=1)
            wait_for(lambda: c.get_job(lost.name).state == "RUNNING", 30, "the held job running")
        held.popen.send_signal(signal.SIGKILL)
        held.popen.wait(10)

        def settled():
            states = dict(
                sql(
                    suite.database_url,
                    "SELECT queue || ':' || state, count(*) FROM jobs WHERE queue IN ('dm_ok', 'dm_thr', 'dm_flaky', 'dm_held') GROUP BY 1",
                )
            )
            return states == {
                "dm_ok:SUCCEEDED": 5,
                "dm_thr:SUCCEEDED": 1,
                "dm_flaky:DEAD": 3,
                "dm_held:DEAD": 1,
            }

        wait_for(settled, 60, "every job finished (5 + 1 succeeded, 3 + 1 dead)")
        assert len(records(ok_rec)) == 5 and len(records(thr_rec)) == 2 and len(records(flaky_rec)) == 3

        def breaker_reported():
            got, hist = exported(suite)
            d = got["dispatcher"]
            opened = value(d, "gnomon_breaker_open", namespace="default", queue="dm_flaky", state="OPEN")
            depth = value(d, "gnomon_queue_depth", namespace="default", queue="dm_ok")
            return opened == 1 and depth is not None and (got, hist)

        got, histograms = wait_for(breaker_reported, 30, "the breaker of dm_flaky reported OPEN")
    finally:
        for w in (ok, thr, flaky):
            suite.stop_proc(w)

    every = {name for samples in got.values() for (name, _labels) in samples}
    missing = set()
    for name in sorted(named):
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
        if base in histograms:  # a histogram is exported with its buckets, count and sum
            missing |= {base + s for s in HISTOGRAM_SUFFIXES} - every
        elif name not in every:
            missing.add(name)
    assert missing == set(), f"named by deploy/ but not exported: {sorted(missing)}"
    assert "gnomon_dispatch_lag_seconds" in histograms

    # the metrics added for the alerts count what happened
    assert (
        value(
            got["dispatcher"],
            "gnomon_dead_letters_total",
            namespace="default",
            queue="dm_flaky",
            failure_class="TRANSIENT",
        )
        == 3
    )
    assert (
        value(
            got["reaper"],
            "gnomon_dead_letters_total",
            namespace="default",
            queue="dm_held",
            failure_class="AMBIGUOUS",
        )
        == 1
    )
    assert value(got["reaper"], "gnomon_leases_lost_total", outcome="DEAD") == 1
    lag = value(got["planner"], "gnomon_planner_lag_seconds")
    assert lag is not None and 0 <= lag < 5  # no schedule waits for planning
    assert value(got["dispatcher"], "gnomon_planner_lag_seconds") is None  # planners only


def test_gnomon_health_is_what_container_probes_run(suite):
    """``gnomon health`` (the containers' readiness check) answers SERVING over TLS with only the CA
    (no credential, even when the environment names a key file that is not there), and exits 1 for a
    port nobody serves."""
    from gnomon.devservers import free_port

    env = {**os.environ, **suite.client_env()}
    # health sends no credential and reads none: a key file the container does not mount is no matter
    env["GNOMON_API_KEY_FILE"] = os.path.join(suite.work_dir, "not-mounted", "admin.key")
    dispatcher = next(p for p in suite.procs if p.role == "dispatcher")
    down = f"127.0.0.1:{free_port()}"

    def health(address: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "gnomon.cli.main", "health", "--address", address, "--timeout", "1"]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=30)

    up = health(dispatcher.address)
    assert up.returncode == 0 and up.stdout.strip() == f"{dispatcher.address}: SERVING", up.stdout + up.stderr
    gone = health(down)
    assert gone.returncode == 1 and gone.stderr.startswith(f"{down}: UNAVAILABLE"), gone.stdout + gone.stderr
