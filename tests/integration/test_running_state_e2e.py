"""A job whose attempt a worker accepted is RUNNING to every client, through the real services,
although the accept writes only the attempt row (gnomon.common.storage.job_view): GetJob shows it
RUNNING with its start time and the version after the accept, ListJobs(state=RUNNING) finds it and
ListJobs(state=QUEUED) does not; a stale result is refused; a cancel is requested, told to the worker
and ends the job CANCELLED; a lost lease turns into a retry."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import Client
from gnomon_test_support import RawStream, running_suite, wait_for


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("running-state"),
        env={"GNOMON_REAPER_SKEW_MARGIN_S": "0.2", "GNOMON_REAPER_INTERVAL_S": "0.2"},
    ) as s:
        yield s


def _accepted(s: RawStream, name: str) -> wpb.AttemptRef:
    """Reads assignments until the one of job ``name``, accepts it, returns its ref (ack ok)."""
    ref = None
    while ref is None:
        for a in s.next("assignments").assignments.assignments:
            if a.attempt.job == name:
                ref = a.attempt
    s.send(accepts=wpb.AttemptRefs(attempts=[ref]))
    [ack] = s.next("acks").acks.acks
    assert (ack.kind, ack.ok) == (wpb.ACK_KIND_ACCEPT, True)
    return ref


def _ack(s: RawStream, kind: int) -> wpb.Ack:
    while True:
        for a in s.next("acks").acks.acks:
            if a.kind == kind:
                return a


def _names(c: Client, state: str) -> set[str]:
    jobs, _ = c.list_jobs_page(state=state, queue="run-state", page_size=100)
    return {j.name for j in jobs}


def test_a_running_job_is_running_to_clients_and_moves_on_as_before(suite):
    with Client(api=suite.api_address) as c:
        job = c.create_job("run-state", b"x", lease_duration=60)
        s = RawStream(suite)
        try:
            s.send(hello=wpb.WorkerHello(worker_id="rs-1", queues=["run-state"], credits=2))
            ref = _accepted(s, job.name)
            got = c.get_job(job.name)
            assert (got.state, got.version) == ("RUNNING", ref.version + 1)
            assert got.start_time is not None and got.start_time >= got.dispatch_time
            assert job.name in _names(c, "RUNNING") and job.name not in _names(c, "QUEUED")
            # a stale result (another fencing token) is refused and changes nothing
            stale = wpb.AttemptRef(job=ref.job, attempt=ref.attempt, version=ref.version)
            stale.fencing_token = ref.fencing_token + 1
            s.send(
                results=wpb.AttemptResults(
                    results=[wpb.AttemptResult(attempt=stale, outcome=wpb.OUTCOME_SUCCEEDED)]
                )
            )
            ack = _ack(s, wpb.ACK_KIND_RESULT)
            assert (ack.ok, ack.reason) == (False, "STALE_FENCING_TOKEN")
            assert c.get_job(job.name).version == got.version
            # cancel: requested (the version a client saw + 1), told in the next heartbeat ack
            outcome, cancelled = c.cancel_job(job.name, expected_version=got.version)
            assert (outcome, cancelled.state, cancelled.version) == (
                "CANCEL_REQUESTED",
                "RUNNING",
                got.version + 1,
            )
            s.send(heartbeats=wpb.Heartbeats(attempts=[ref]))
            hb = _ack(s, wpb.ACK_KIND_HEARTBEAT)
            assert (hb.ok, hb.cancel_requested) == (True, True)
            s.send(
                results=wpb.AttemptResults(
                    results=[wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_FAILED, error="stopped")]
                )
            )
            assert _ack(s, wpb.ACK_KIND_RESULT).ok
            end = c.get_job(job.name)
            assert (end.state, end.version, end.start_time) == ("CANCELLED", got.version + 2, got.start_time)
        finally:
            s.close()


def test_a_running_attempt_whose_lease_ends_is_retried(suite):
    with Client(api=suite.api_address) as c:
        job = c.create_job("run-state", b"y", lease_duration=1, idempotent=True, max_attempts=3)
        s = RawStream(suite)
        try:
            s.send(hello=wpb.WorkerHello(worker_id="rs-2", queues=["run-state"], credits=2))
            ref = _accepted(s, job.name)
            assert c.get_job(job.name).state == "RUNNING"
            # no heartbeat: the reaper declares the attempt LOST and the job is dispatched again
            again = _accepted(s, job.name)
            assert (again.attempt, again.version > ref.version) == (2, True)
            attempts = list(c.list_job_attempts(job.name))
            assert [a.state for a in attempts] == ["LOST", "RUNNING"]
            got = wait_for(lambda: (j := c.get_job(job.name)).attempt == 2 and j, 10, "attempt 2 running")
            assert (got.state, got.version) == ("RUNNING", again.version + 1)
        finally:
            s.close()
