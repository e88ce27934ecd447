"""The worker conformance suite: every available driver (``drivers.py``) against a real suite (PostgreSQL,
etcd, api, planner, 2 dispatchers, reaper; TLS with the session CA, the admin's API key), one suite per
driver shared by the cases, one queue per case. The contract: ``tests/conformance/README.md``.

Each case drives the worker through job payloads and judges it by the history the API records (job
states, attempts with failure class, error and worker) and by the driver's events file.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from drivers import Driver, selected
from harness import FAST_RETRY, SUITE_ENV, Conformance, failure_class, most_running, of

from gnomon.sdk import Client
from gnomon_test_support import running_suite, wait_for

_DRIVERS = selected()


@pytest.fixture(scope="module", params=_DRIVERS, ids=[d.name for d in _DRIVERS])
def conf(request, pg_server, migrated_template, tmp_path_factory) -> Iterator[Conformance]:
    """One suite per driver for every case of the module."""
    driver: Driver = request.param
    if not driver.available():
        pytest.fail(f"driver {driver.name} selected but not available: {driver.why_unavailable}")
    work = tmp_path_factory.mktemp(f"conformance-{driver.name}")
    with running_suite(pg_server, migrated_template, work, dispatchers=2, env=SUITE_ENV) as suite:
        with Client(api=suite.api_address) as client:
            yield Conformance(suite, driver, work, client)


@pytest.fixture
def c(conf: Conformance) -> Iterator[Conformance]:
    """The module's conformance setup for one case: its drivers are killed when the case ends."""
    with conf.case() as case:
        yield case


def test_exactly_once_without_faults(c: Conformance) -> None:
    driver = c.start("once", concurrency=8)
    names = c.create("once", {"do": "succeed"}, n=200)
    jobs = c.wait_final("once", names, 60)
    assert Counter((j.state, j.attempt) for j in jobs.values()) == {("SUCCEEDED", 1): 200}, "one attempt each"
    events = driver.events()
    starts = Counter(e["job"] for e in of(events, "start"))
    assert starts == dict.fromkeys(names, 1), "every job started exactly once"
    assert Counter(e["job"] for e in of(events, "finish")) == dict.fromkeys(names, 1)
    assert {e["outcome"] for e in of(events, "finish")} == {"succeeded"}
    assert 1 <= most_running(events, driver.pid) <= 8, "never more handlers than CONFORMANCE_CONCURRENCY"
    for name in names[:20]:  # the attempt history of a sample: one SUCCEEDED attempt, as started
        [a] = c.attempts(name)
        [start] = of(events, "start", name)
        assert (a.state, a.attempt, start["attempt"]) == ("SUCCEEDED", 1, 1)
        assert start["fencing_token"] == a.fencing_token
        assert start["idempotency_key"] == jobs[name].idempotency_key
        assert start["last_checkpoint"] is None


def test_retries_classified(c: Conformance) -> None:
    c.start("retries")
    q = "retries"

    def fail(cls: str, **extra) -> dict:
        return {"do": "fail", "class": cls, "message": f"{cls} on purpose", **extra}

    [transient] = c.create(q, fail("transient"), max_attempts=2, retry_policy=FAST_RETRY)
    [permanent] = c.create(q, fail("permanent"), max_attempts=3, retry_policy=FAST_RETRY)
    [throttled] = c.create(q, fail("throttled", retry_after_s=2), max_attempts=2, retry_policy=FAST_RETRY)
    [ambiguous] = c.create(q, fail("ambiguous"), max_attempts=3, retry_policy=FAST_RETRY)
    [ambiguous_idem] = c.create(
        q, fail("ambiguous"), max_attempts=2, idempotent=True, retry_policy=FAST_RETRY
    )
    names = [transient, permanent, throttled, ambiguous, ambiguous_idem]
    jobs = c.wait_final(q, names, 60)
    assert {n: jobs[n].state for n in names} == dict.fromkeys(names, "DEAD")
    history = {n: c.attempts(n) for n in names}
    attempts = {n: len(h) for n, h in history.items()}
    assert attempts == {transient: 2, permanent: 1, throttled: 2, ambiguous: 1, ambiguous_idem: 2}
    expected = {transient: "TRANSIENT", permanent: "PERMANENT", throttled: "THROTTLED"}
    expected |= {ambiguous: "AMBIGUOUS", ambiguous_idem: "AMBIGUOUS"}
    for name, cls in expected.items():
        for a in history[name]:
            assert (a.state, failure_class(a)) == ("FAILED", cls), (name, a)
            assert f"{cls.lower()} on purpose" in a.error, a.error
            assert a.worker_id, "the attempt records the worker that ran it"
    # THROTTLED: attempt 2 not claimed before attempt 1's end + retry_after (database clock)
    t1, t2 = history[throttled]
    assert t1.finish_time is not None and t2.claim_time is not None
    assert t2.claim_time >= t1.finish_time + timedelta(seconds=2), (t1.finish_time, t2.claim_time)
    # PERMANENT (and the others that ran out): in the dead-letter queue
    dead, _ = c.client.list_dead_letters_page(queue=q, page_size=100)
    assert set(names) <= {d.job.name for d in dead}


def test_leases_renewed(c: Conformance) -> None:
    driver = c.start("renew")
    [name] = c.create("renew", {"do": "sleep", "s": 6}, lease_duration=2, max_attempts=2)
    job = c.wait_final("renew", [name], 30)[name]
    assert job.state == "SUCCEEDED"
    [a] = c.attempts(name)
    assert a.state == "SUCCEEDED"
    events = driver.events()
    assert len(of(events, "start", name)) == 1
    assert of(events, "cancelled", name) == [], "the lease was never lost"
    [finish] = of(events, "finish", name)
    assert finish["outcome"] == "succeeded"
    assert finish["t"] - of(events, "start", name)[0]["t"] >= 6 - 0.05  # ran 3 leases long


def test_stale_result_refused(c: Conformance) -> None:
    driver = c.start("stale")
    [name] = c.create(
        "stale",
        {"do": "block", "s": 6},
        lease_duration=2,
        max_attempts=2,
        idempotent=True,
        retry_policy=FAST_RETRY,
    )
    job = c.wait_final("stale", [name], 45)[name]
    history = c.attempts(name)
    assert [a.state for a in history] == ["LOST", "SUCCEEDED"], (
        "attempt 1 expired by the reaper, attempt 2 won"
    )
    a1 = history[0]
    assert (job.state, job.attempt) == ("SUCCEEDED", 2)
    events = driver.events()
    # attempt 1's handler did return (its late result), after the attempt had been declared LOST
    [late] = [e for e in of(events, "finish", name) if e["attempt"] == 1]
    assert late["outcome"] == "succeeded"
    assert a1.finish_time is not None and late["t"] > a1.finish_time.timestamp(), (late, a1.finish_time)
    assert [e["attempt"] for e in of(events, "start", name)] == [1, 2]


def test_lease_loss_observed(c: Conformance) -> None:
    """A driver frozen (SIGSTOP) past its lease, then resumed: it observes the loss (``cancelled``
    with reason ``lease_lost``), reports nothing that changes attempt 1, and runs attempt 2."""
    driver = c.start("lost")
    [name] = c.create(
        "lost",
        {"do": "sleep", "s": 6},
        lease_duration=2,
        max_attempts=2,
        idempotent=True,
        retry_policy=FAST_RETRY,
    )
    wait_for(lambda: of(driver.events(), "start", name), 20, "the handler to start")
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: c.attempts(name)[0].state == "LOST", 20, "the reaper to declare attempt 1 lost")
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    job = c.wait_final("lost", [name], 30)[name]
    history = c.attempts(name)
    assert [a.state for a in history] == ["LOST", "SUCCEEDED"], "nothing the driver sent changed attempt 1"
    assert job.state == "SUCCEEDED"
    events = driver.events()
    assert [(e["attempt"], e["reason"]) for e in of(events, "cancelled", name)] == [(1, "lease_lost")]
    assert [e["attempt"] for e in of(events, "start", name)] == [1, 2]
    assert [e["outcome"] for e in of(events, "finish", name) if e["attempt"] == 2] == ["succeeded"]


def test_checkpoint_and_resume(c: Conformance) -> None:
    driver = c.start("checkpoint")
    data = "step 7 of 9 ✓ résumé"
    [name] = c.create(
        "checkpoint",
        {"do": "checkpoint", "data": data},
        lease_duration=2,
        max_attempts=2,
        retry_policy=FAST_RETRY,
    )
    job = c.wait_final("checkpoint", [name], 45)[name]
    assert job.state == "SUCCEEDED"
    history = c.attempts(name)
    assert [(a.state, failure_class(a)) for a in history] == [("FAILED", "TRANSIENT"), ("SUCCEEDED", "")]
    events = driver.events()
    assert [e["attempt"] for e in of(events, "checkpointed", name)] == [1]
    starts = [(e["attempt"], e["last_checkpoint"]) for e in of(events, "start", name)]
    assert starts == [(1, None), (2, data)], "attempt 2 resumed from attempt 1's checkpoint"


def test_cancel_observed(c: Conformance) -> None:
    driver = c.start("cancel")
    [name] = c.create("cancel", {"do": "wait_cancel", "timeout_s": 30}, max_attempts=3)
    wait_for(lambda: of(driver.events(), "start", name), 20, "the handler to start")
    outcome, _ = c.client.cancel_job(name)
    assert outcome == "CANCEL_REQUESTED"
    job = c.wait_final("cancel", [name], 30)[name]
    assert job.state == "CANCELLED"
    [a] = c.attempts(name)
    assert a.cancel_requested
    events = driver.events()
    assert [e["reason"] for e in of(events, "cancelled", name)] == ["cancel"]
    [finish] = of(events, "finish", name)
    assert finish["outcome"] == "failed"


def test_killed_mid_job(c: Conformance) -> None:
    first = c.start("killed")
    [name] = c.create(
        "killed", {"do": "exit"}, lease_duration=2, max_attempts=2, idempotent=True, retry_policy=FAST_RETRY
    )
    assert first.wait_exit(30) == 137, "the driver exits at once with code 137"
    second = c.start("killed")
    job = c.wait_final("killed", [name], 45)[name]
    assert job.state == "SUCCEEDED"
    history = c.attempts(name)
    assert [a.state for a in history] == ["LOST", "SUCCEEDED"]
    assert history[0].worker_id != history[1].worker_id
    starts = of(second.events(), "start", name)
    assert [(e["attempt"], e["pid"]) for e in starts] == [(1, first.pid), (2, second.pid)]
    assert [e["attempt"] for e in of(second.events(), "finish", name)] == [2]


def test_credits_never_stall(c: Conformance) -> None:
    driver = c.start("credits", concurrency=2)
    commands = [
        {"do": "succeed"},
        {"do": "fail", "class": "permanent", "message": "no"},
        {"do": "fail", "class": "transient", "message": "again"},
    ]
    names: list[str] = []
    kinds: dict[str, int] = {}
    for i in range(100):
        [n] = c.create("credits", commands[i % 3], max_attempts=2, retry_policy=FAST_RETRY)
        names.append(n)
        kinds[n] = i % 3
    jobs = c.wait_final("credits", names, 90)
    states = Counter((kinds[n], jobs[n].state) for n in names)
    assert states == {(0, "SUCCEEDED"): 34, (1, "DEAD"): 33, (2, "DEAD"): 33}
    starts = Counter(e["job"] for e in of(driver.events(), "start"))
    assert starts == {n: 2 if kinds[n] == 2 else 1 for n in names}
    assert most_running(driver.events(), driver.pid) <= 2, "never more handlers than CONFORMANCE_CONCURRENCY"


def test_graceful_drain(c: Conformance) -> None:
    names = c.create("drain", {"do": "sleep", "s": 2}, n=20, lease_duration=10)
    first = c.start("drain", concurrency=4)
    wait_for(lambda: of(first.events(), "start"), 30, "the first handler to start")
    first.terminate()
    assert first.wait_exit(30) == 0, f"graceful drain exits 0:\n{first.log()}"
    events = first.events()
    started = {e["job"] for e in of(events, "start") if e["pid"] == first.pid}
    finished = {e["job"]: e["outcome"] for e in of(events, "finish") if e["pid"] == first.pid}
    assert finished == dict.fromkeys(started, "succeeded"), "running handlers finished"
    assert 0 < len(started) < 20, "the drained driver stopped taking work"
    assert most_running(events, first.pid) <= 4
    jobs = c.jobs("drain")
    assert Counter(jobs[n].state for n in started) == {"SUCCEEDED": len(started)}
    assert not [n for n in names if jobs[n].state == "RUNNING"], "nothing left running"
    second = c.start("drain", concurrency=8)
    final = c.wait_final("drain", names, 60)
    assert Counter(j.state for j in final.values()) == {"SUCCEEDED": 20}
    events = second.events()
    assert Counter(e["job"] for e in of(events, "start")) == dict.fromkeys(names, 1), "no job ran twice"
    assert {e["attempt"] for e in of(events, "start")} == {1}, "released attempts were never started"
    for name in names:
        [a] = c.attempts(name)
        assert a.state == "SUCCEEDED"
