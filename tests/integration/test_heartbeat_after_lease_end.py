"""A heartbeat that reaches the dispatcher after the attempt's recorded lease end is refused with
``LEASE_EXPIRED`` and renews nothing (docs/protocol.md, "Lease loss"), on the real suite: the
reaper's skew margin is long here, so the attempt is still RUNNING (not yet declared LOST) when the
late heartbeat arrives, which is exactly the window in which a heartbeat used to revive the lease."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import Client
from gnomon_test_support import RawStream, running_suite, sql, wait_for


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("late-heartbeat"),
        env={"GNOMON_REAPER_SKEW_MARGIN_S": "60", "GNOMON_REAPER_INTERVAL_S": "0.2"},
    ) as s:
        yield s


def lease_row(suite, job: str) -> tuple:
    """``(state, lease_expires_at, lease end passed)`` of the job's attempt 1, database clock."""
    [row] = sql(
        suite.database_url,
        "SELECT state, lease_expires_at, lease_expires_at < now() FROM attempts WHERE job_id = %s::uuid "
        "AND attempt = 1",
        job.rsplit("/", 1)[1],
    )
    return tuple(row)


def test_a_heartbeat_after_the_lease_end_is_lease_expired_and_renews_nothing(suite):
    with Client(api=suite.api_address) as c:
        job = c.create_job("late-hb", b"x", lease_duration=1.0, max_attempts=1)
    s = RawStream(suite)
    try:
        s.send(hello=wpb.WorkerHello(worker_id="late-hb-1", queues=["late-hb"], credits=1))
        assert s.next("welcome").welcome.HasField("heartbeat_interval")
        [a] = s.next("assignments").assignments.assignments
        assert a.attempt.job == job.name and a.lease_duration.ToTimedelta().total_seconds() == 1.0
        s.send(accepts=wpb.AttemptRefs(attempts=[a.attempt]))
        [ack] = s.next("acks").acks.acks
        assert (ack.kind, ack.ok) == (wpb.ACK_KIND_ACCEPT, True)
        # in time: renewed
        s.send(heartbeats=wpb.Heartbeats(attempts=[a.attempt]))
        [ack] = s.next("acks").acks.acks
        assert (ack.kind, ack.ok, ack.reason) == (wpb.ACK_KIND_HEARTBEAT, True, "")
        assert ack.HasField("lease_expire_time")
        # silent past the lease end (database clock), then a heartbeat
        before = wait_for(lambda: (r := lease_row(suite, job.name))[2] and r, 10, "the lease end to pass")
        assert before[0] == "RUNNING"
        s.send(heartbeats=wpb.Heartbeats(attempts=[a.attempt]))
        [ack] = s.next("acks").acks.acks
        assert (ack.kind, ack.ok, ack.reason) == (wpb.ACK_KIND_HEARTBEAT, False, "LEASE_EXPIRED")
        assert not ack.HasField("lease_expire_time")
        after = lease_row(suite, job.name)
        assert after == before  # still RUNNING (the reaper's margin), the lease end unchanged
        # nor does a re-sent accept (as after a reconnect) answer ok on the ended lease
        s.send(accepts=wpb.AttemptRefs(attempts=[a.attempt]))
        [ack] = s.next("acks").acks.acks
        assert (ack.kind, ack.ok, ack.reason) == (wpb.ACK_KIND_ACCEPT, False, "STALE_ATTEMPT")
        assert lease_row(suite, job.name) == before
        # a heartbeat for an attempt the worker does not hold is stale, not expired
        other = wpb.AttemptRef(job=a.attempt.job, attempt=a.attempt.attempt, version=a.attempt.version + 7)
        other.fencing_token = a.attempt.fencing_token
        s.send(heartbeats=wpb.Heartbeats(attempts=[other]))
        [ack] = s.next("acks").acks.acks
        assert (ack.ok, ack.reason) == (False, "STALE_ATTEMPT")
    finally:
        s.close()
