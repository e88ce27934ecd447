"""The job id as bytes in AttemptRef: the dispatcher sets it in every assignment and identifies the
job by it on accept, heartbeat and result (the name is not parsed then); a reference without it
(a worker of an earlier release) is identified by its job name; a job_id of another length is
refused for that item alone (INVALID_FIELD)."""

from __future__ import annotations

import uuid

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import Client
from gnomon_test_support import RawStream, running_suite, wait_for


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("attempt-ref-job-id")) as s:
        yield s


def _assigned(stream: RawStream, names: set[str]) -> dict[str, wpb.AttemptRef]:
    got: dict[str, wpb.AttemptRef] = {}
    while set(got) != names:
        for a in stream.next("assignments").assignments.assignments:
            if a.attempt.job in names:
                got[a.attempt.job] = a.attempt
    return got


def _run(stream: RawStream, ref: wpb.AttemptRef) -> list[wpb.Ack]:
    """Accept, heartbeat, result of ``ref``; the three acks."""
    acks = []
    stream.send(accepts=wpb.AttemptRefs(attempts=[ref]))
    acks += stream.next("acks").acks.acks
    stream.send(heartbeats=wpb.Heartbeats(attempts=[ref]))
    acks += stream.next("acks").acks.acks
    stream.send(
        results=wpb.AttemptResults(results=[wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)])
    )
    acks += stream.next("acks").acks.acks
    return acks


def test_job_id_set_used_and_old_style_references_still_work(suite):
    with Client(api=suite.api_address, namespace="default") as c:
        jobs = [c.create_job("refs", payload=b"x") for _ in range(3)]
    s = RawStream(suite)
    s.send(hello=wpb.WorkerHello(worker_id="w-refs", queues=["refs"], credits=10))
    refs = _assigned(s, {j.name for j in jobs})
    for name, ref in refs.items():  # set by the dispatcher: the UUID of the name, 16 bytes
        assert ref.job_id == uuid.UUID(name.rsplit("/", 1)[1]).bytes

    new_style, old_style, bad = (refs[j.name] for j in jobs)
    # the id names the job: a name the dispatcher could not parse does not matter when it is present
    by_id = wpb.AttemptRef()
    by_id.CopyFrom(new_style)
    by_id.job = "not-a-job-name"
    # a worker of an earlier release: no job_id, only the name
    by_name = wpb.AttemptRef()
    by_name.CopyFrom(old_style)
    by_name.ClearField("job_id")
    for ref in (by_id, by_name):
        acks = _run(s, ref)
        assert [(a.kind, a.ok) for a in acks] == [
            (wpb.ACK_KIND_ACCEPT, True),
            (wpb.ACK_KIND_HEARTBEAT, True),
            (wpb.ACK_KIND_RESULT, True),
        ], acks
        assert all(a.attempt == ref for a in acks)  # echoed as sent

    short = wpb.AttemptRef()
    short.CopyFrom(bad)
    short.job_id = bad.job_id[:15]
    s.send(accepts=wpb.AttemptRefs(attempts=[short]))
    [ack] = s.next("acks").acks.acks
    assert (ack.kind, ack.ok, ack.reason) == (wpb.ACK_KIND_ACCEPT, False, "INVALID_FIELD")
    s.close()
    with Client(api=suite.api_address, namespace="default") as c:
        for j in jobs[:2]:
            wait_for(lambda j=j: c.get_job(j.name).state == "SUCCEEDED" or None, 10, f"{j.name} finished")
