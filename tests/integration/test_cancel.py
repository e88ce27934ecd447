"""CancelJob and RescheduleJob: the API in-process over real gRPC, real PostgreSQL, and the
dispatcher's storage calls (claim, accept, heartbeat, complete, relay scan) made directly, as a
dispatcher would; then one end-to-end run through real processes.

Races are forced, not hoped for: one transaction is left open holding a row lock while the
cancel runs, and the test waits (polling ``pg_stat_activity``) until the cancel is blocked on it
before committing.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import func, select, text

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon.common.domain.attempts import AttemptKey, Claimed, Result
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import outbox as outbox_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs, outbox
from gnomon_test_support import (
    DIALECTS,
    job_service,
    own_shards,
    running_suite,
    serving,
    wait_for,
    wait_until,
)

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDS = 8
TOKEN = 7
TOKENS = {s: TOKEN for s in range(SHARDS)}
OUT = js.CancelOutcome


dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)


@pytest.fixture
async def env(engine):
    """(stub, engine, address): JobService in this event loop, and an engine owning every shard;
    through both dialects, PostgreSQL and the production ``cockroachdb+psycopg`` (which also runs
    against PostgreSQL, as in test_fencing.py)."""
    await own_shards(engine, TOKEN, range(SHARDS), owner="D")
    async with serving(job_service(engine, SHARDS)) as (channel, address):
        yield jg.JobServiceStub(channel), engine, address


def decode(err: grpc.aio.AioRpcError):
    """(ErrorInfo, BadRequest or None) of a failed call."""
    info, bad = error_details_pb2.ErrorInfo(), None
    for d in rpc_status.from_call(err).details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            d.Unpack(info)
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
    return info, bad


def job_id(job: job_pb2.Job) -> uuid.UUID:
    return uuid.UUID(job.name.rsplit("/", 1)[1])


async def create(stub, **kw) -> job_pb2.Job:
    return (await stub.CreateJob(js.CreateJobRequest(queue="q", **kw))).job


async def claim(engine, limit: int = 100) -> list[Claimed]:
    return await run_transaction(
        engine,
        lambda c: claim_store.claim_due(
            c, region="local", tokens=TOKENS, targets=[("default", "q")], limit=limit, dispatcher_id="D"
        ),
    )


def key(c: Claimed) -> AttemptKey:
    return AttemptKey(c.job_id, c.attempt, c.version, c.token)


async def running(stub, engine, n: int) -> tuple[list[job_pb2.Job], list[AttemptKey]]:
    """``n`` jobs created, claimed and accepted by worker W (RUNNING, version 3)."""
    created = [await create(stub) for _ in range(n)]
    by_id = {c.job_id: c for c in await claim(engine)}
    keys = [key(by_id[job_id(j)]) for j in created]
    assert len(await run_transaction(engine, lambda c: lease_store.accept(c, keys, "W"))) == n
    return created, keys


async def row(engine, jid: uuid.UUID) -> dict:
    async with engine.connect() as c:
        return dict((await c.execute(select(jobs).where(jobs.c.id == jid))).mappings().one())


async def attempt_row(engine, jid: uuid.UUID, attempt: int = 1) -> dict:
    async with engine.connect() as c:
        return dict(
            (await c.execute(select(attempts).where(attempts.c.job_id == jid, attempts.c.attempt == attempt)))
            .mappings()
            .one()
        )


async def cancel(stub, job: job_pb2.Job, expected_version: int | None = None) -> js.CancelJobResponse:
    req = js.CancelJobRequest(name=job.name)
    if expected_version is not None:
        req.expected_version = expected_version
    return await stub.CancelJob(req)


async def rpc_error(coro) -> tuple[grpc.StatusCode, str, list[str]]:
    """(code, ErrorInfo reason, BadRequest fields) of a failing call."""
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await coro
    info, bad = decode(e.value)
    assert "Traceback" not in e.value.details()
    return e.value.code(), info.reason, [v.field for v in bad.field_violations] if bad else []


def complete(engine, results):
    return run_transaction(engine, lambda c: result_store.complete(c, results, retry_delay_s=lambda r, a: 0))


# -- cancel, state by state -------------------------------------------------------------------------


async def test_cancel_scheduled_job_is_cancelled_and_never_claimed(env):
    stub, engine, _ = env
    job = await create(stub)  # due now
    resp = await cancel(stub, job)
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCELLED
    assert resp.job.state == job_pb2.JOB_STATE_CANCELLED and resp.job.version == 2
    assert resp.job.HasField("finish_time")
    assert await claim(engine) == []
    async with engine.connect() as c:
        assert (await c.execute(select(func.count()).select_from(attempts))).scalar_one() == 0
    assert (await stub.GetJob(js.GetJobRequest(name=job.name))).job == resp.job


async def test_cancel_queued_job_refuses_the_old_message_and_the_relay_never_redelivers_it(env):
    stub, engine, _ = env
    job, other = await create(stub), await create(stub)
    claimed = {c.job_id: c for c in await claim(engine)}
    c1 = claimed[job_id(job)]
    assert (await row(engine, c1.job_id))["state"] == JobState.QUEUED
    # before the cancel the relay's recovery scan would re-deliver both unaccepted attempts
    before = await run_transaction(
        engine,
        lambda c: outbox_store.pending_outbox(c, region="local", tokens=TOKENS, exclude=set(), limit=10),
    )
    assert {c.job_id for c in before} == set(claimed)

    resp = await cancel(stub, job)
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCELLED
    assert resp.job.state == job_pb2.JOB_STATE_CANCELLED and resp.job.version == 3
    a = await attempt_row(engine, c1.job_id)
    assert a["state"] == AttemptState.CANCELLED and a["finished_at"] is not None
    async with engine.connect() as c:
        published = (
            await c.execute(select(outbox.c.published_at).where(outbox.c.job_id == c1.job_id))
        ).scalar_one()
    assert published is not None

    # a worker accepting the message already in flight is refused, and so is its heartbeat
    assert await run_transaction(engine, lambda c: lease_store.accept(c, [key(c1)], "W")) == {}
    assert await run_transaction(engine, lambda c: lease_store.heartbeat(c, [key(c1)])) == {}
    # the relay re-delivers only the other job
    pending = await run_transaction(
        engine,
        lambda c: outbox_store.pending_outbox(c, region="local", tokens=TOKENS, exclude=set(), limit=10),
    )
    assert [c.job_id for c in pending] == [job_id(other)]
    r = await row(engine, c1.job_id)
    assert (r["state"], r["version"], r["started_at"]) == (JobState.CANCELLED, 3, None)


async def test_cancel_running_requests_it_then_no_retry_whatever_the_failure_class(env):
    stub, engine, _ = env
    classes = ["TRANSIENT", "THROTTLED", "PERMANENT", "AMBIGUOUS"]
    created, keys = await running(stub, engine, len(classes) + 2)  # the last two: success, untouched
    for j in created[:-1]:
        resp = await cancel(stub, j)
        assert resp.outcome == OUT.CANCEL_OUTCOME_CANCEL_REQUESTED
        assert resp.job.state == job_pb2.JOB_STATE_RUNNING and resp.job.version == 4
    # asking again changes nothing
    again = await cancel(stub, created[0])
    assert again.outcome == OUT.CANCEL_OUTCOME_CANCEL_REQUESTED and again.job.version == 4
    assert (await row(engine, keys[0].job_id))["cancel_requested_at"] is not None
    assert (await attempt_row(engine, keys[0].job_id))["cancel_requested"] is True

    # heartbeats renew the lease and say which attempts are to stop; so does the push query
    hb = await run_transaction(engine, lambda c: lease_store.heartbeat(c, keys))
    assert {k.job_id: hb[(k.job_id, 1)][1] for k in keys} == {k.job_id: k is not keys[-1] for k in keys}
    pairs = [(k.job_id, k.attempt) for k in keys]
    assert await run_transaction(engine, lambda c: cancel_store.cancel_requested_attempts(c, pairs)) == set(
        pairs[:-1]
    )

    # every failure class (all retryable here but PERMANENT, max_attempts 3) ends CANCELLED
    results = [
        Result(key=k, succeeded=False, failure_class=cls, error="stopped") for k, cls in zip(keys, classes)
    ]
    results.append(Result(key=keys[len(classes)], succeeded=True))
    assert set((await complete(engine, results)).values()) == {""}
    for k, cls in zip(keys, classes):
        r = await row(engine, k.job_id)
        assert (r["state"], r["version"], r["failure_class"]) == (JobState.CANCELLED, 5, cls)
        assert r["finished_at"] is not None and r["attempt"] == 1
    # a success after the request is the real outcome
    assert (await row(engine, keys[len(classes)].job_id))["state"] == JobState.SUCCEEDED
    # and the untouched job still retries after a transient failure
    assert await complete(engine, [Result(key=keys[-1], succeeded=False)]) == {(keys[-1].job_id, 1): ""}
    assert (await row(engine, keys[-1].job_id))["state"] == JobState.SCHEDULED
    assert await run_transaction(engine, lambda c: cancel_store.cancel_requested_attempts(c, pairs)) == set()


async def test_cancel_of_a_terminal_job_is_already_finished_and_changes_nothing(env):
    stub, engine, _ = env
    [job], [k] = await running(stub, engine, 1)
    await complete(engine, [Result(key=k, succeeded=True)])
    before = await row(engine, k.job_id)
    resp = await cancel(stub, job)
    assert resp.outcome == OUT.CANCEL_OUTCOME_ALREADY_FINISHED
    assert resp.job.state == job_pb2.JOB_STATE_SUCCEEDED and resp.job.version == before["version"] == 4
    assert await row(engine, k.job_id) == before
    cancelled = await create(stub)
    await cancel(stub, cancelled)
    resp = await cancel(stub, cancelled)
    assert (
        resp.outcome == OUT.CANCEL_OUTCOME_ALREADY_FINISHED and resp.job.state == job_pb2.JOB_STATE_CANCELLED
    )


async def test_expected_version_mismatch_is_stale_version_and_changes_nothing(env):
    stub, engine, _ = env
    job = await create(stub)
    before = await row(engine, job_id(job))
    assert await rpc_error(cancel(stub, job, expected_version=7)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "STALE_VERSION",
        [],
    )
    assert await rpc_error(
        stub.RescheduleJob(
            js.RescheduleJobRequest(
                name=job.name, delay=duration_pb2.Duration(seconds=60), expected_version=0
            )
        )
    ) == (grpc.StatusCode.FAILED_PRECONDITION, "STALE_VERSION", [])
    assert await row(engine, job_id(job)) == before
    # the right version works
    resp = await cancel(stub, job, expected_version=1)
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCELLED and resp.job.version == 2


async def test_cancel_of_unknown_job_or_bad_name(env):
    stub, _, _ = env
    assert (
        await rpc_error(stub.CancelJob(js.CancelJobRequest(name=f"namespaces/default/jobs/{uuid.uuid4()}")))
    )[:2] == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
    assert await rpc_error(stub.CancelJob(js.CancelJobRequest(name="jobs/x"))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD",
        ["name"],
    )
    job = await create(stub)
    other_ns = job.name.replace("namespaces/default/", "namespaces/other/")
    assert (await rpc_error(stub.CancelJob(js.CancelJobRequest(name=other_ns))))[
        0
    ] == grpc.StatusCode.NOT_FOUND


# -- races: each side wins once ---------------------------------------------------------------------


async def wait_blocked(engine, n: int = 1) -> None:
    """Until ``n`` backends of this database wait for a lock (no sleeping on a guess)."""
    q = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )

    async def blocked() -> bool:
        async with engine.connect() as c:
            return (await c.execute(q)).scalar_one() >= n

    await wait_until(blocked, 10, "the cancel to block on the open transaction", interval_s=0.01)


async def test_cancel_racing_an_accept_retries_its_compare_and_set_and_requests_cancellation(env):
    stub, engine, _ = env
    job = await create(stub)
    [c1] = await claim(engine)
    async with engine.connect() as held:
        tx = await held.begin()
        assert await lease_store.accept(held, [key(c1)], "W")  # QUEUED -> RUNNING, not committed
        task = asyncio.create_task(cancel(stub, job))  # reads QUEUED v2, blocks on the row
        await wait_blocked(engine)
        await tx.commit()
    resp = await task
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCEL_REQUESTED  # second try: RUNNING v3
    assert resp.job.state == job_pb2.JOB_STATE_RUNNING and resp.job.version == 4
    assert (await attempt_row(engine, c1.job_id))["cancel_requested"] is True


async def test_cancel_racing_a_failed_result_cancels_the_retry_instead(env):
    stub, engine, _ = env
    [job], [k] = await running(stub, engine, 1)
    async with engine.connect() as held:
        tx = await held.begin()
        await result_store.complete(held, [Result(key=k, succeeded=False)], retry_delay_s=lambda r, a: 0)
        task = asyncio.create_task(cancel(stub, job))  # reads RUNNING v3, blocks on the attempt
        await wait_blocked(engine)
        await tx.commit()  # -> SCHEDULED v4 (a retry)
    resp = await task
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCELLED  # second try: SCHEDULED -> CANCELLED
    assert resp.job.state == job_pb2.JOB_STATE_CANCELLED and resp.job.version == 5
    assert await claim(engine) == []


async def test_concurrent_cancels_and_worker_writes_agree_and_never_retry_a_cancelled_job(env):
    """Cancels racing accepts and failed (retryable) results on many jobs: whatever wins, each job
    ends where what both sides were told says it must."""
    stub, engine, _ = env
    created = [await create(stub) for _ in range(20)]
    by_id = {c.job_id: c for c in await claim(engine)}

    async def worker(j):
        k = key(by_id[job_id(j)])
        ok = await run_transaction(engine, lambda c: lease_store.accept(c, [k], "W"))
        if ok:
            await complete(engine, [Result(key=k, succeeded=False)])
        return bool(ok)

    async def try_cancel(j):
        try:
            return (await cancel(stub, j)).outcome
        except grpc.aio.AioRpcError as e:  # lost two compare-and-sets in a row: told, nothing done
            assert e.code() == grpc.StatusCode.ABORTED and decode(e)[0].reason == "CONCURRENT_MODIFICATION"
            return None

    outs = await asyncio.gather(*[asyncio.gather(worker(j), try_cancel(j)) for j in created])
    for j, (accepted, outcome) in zip(created, outs):
        r = await row(engine, job_id(j))
        if not accepted:  # the cancel won: the message was refused, never started
            assert outcome == OUT.CANCEL_OUTCOME_CANCELLED and r["started_at"] is None
            assert (await attempt_row(engine, job_id(j)))["state"] == AttemptState.CANCELLED
        if outcome is None:
            assert r["state"] == JobState.SCHEDULED and r["cancel_requested_at"] is None  # an ordinary retry
        else:  # cancelled or requested: a failed attempt is never retried
            assert r["state"] == JobState.CANCELLED


# -- reschedule -------------------------------------------------------------------------------------


async def test_reschedule_moves_a_scheduled_job_and_it_is_not_claimed_before(env):
    stub, engine, _ = env
    job = await create(stub)  # due now
    resp = await stub.RescheduleJob(
        js.RescheduleJobRequest(name=job.name, delay=duration_pb2.Duration(seconds=60))
    )
    moved = resp.job
    assert moved.version == 2 and moved.state == job_pb2.JOB_STATE_SCHEDULED
    async with engine.connect() as c:
        now = (await c.execute(select(func.now()))).scalar_one()
    sched = moved.schedule_time.ToDatetime(tzinfo=UTC)
    assert timedelta(seconds=50) < sched - now <= timedelta(seconds=60)
    assert await claim(engine) == []
    # an absolute instant, to the microsecond
    at = timestamp_pb2.Timestamp(seconds=4_102_444_800, nanos=123_456_000)  # 2100-01-01
    moved = (
        await stub.RescheduleJob(js.RescheduleJobRequest(name=job.name, schedule_time=at, expected_version=2))
    ).job
    assert moved.schedule_time == at and moved.version == 3
    assert (await row(engine, job_id(job)))["scheduled_at"] == datetime(2100, 1, 1, 0, 0, 0, 123456, UTC)
    # neither field: now; then it is claimed
    moved = (await stub.RescheduleJob(js.RescheduleJobRequest(name=job.name))).job
    assert moved.version == 4
    assert [c.job_id for c in await claim(engine)] == [job_id(job)]


async def test_reschedule_of_a_dispatched_or_finished_job_is_refused(env):
    stub, engine, _ = env
    job = await create(stub)
    await claim(engine)
    req = js.RescheduleJobRequest(name=job.name, delay=duration_pb2.Duration(seconds=5))
    assert await rpc_error(stub.RescheduleJob(req)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "JOB_NOT_RESCHEDULABLE",
        [],
    )
    await cancel(stub, job)
    assert (await rpc_error(stub.RescheduleJob(req)))[1] == "JOB_NOT_RESCHEDULABLE"
    assert (await row(engine, job_id(job)))["version"] == 3


BAD_RESCHEDULES = [
    (
        "schedule_time and delay",
        dict(
            schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_000),
            delay=duration_pb2.Duration(seconds=1),
        ),
        "delay",
    ),
    (
        "schedule_time before 1970",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=-86400)),
        "schedule_time",
    ),
    (
        "schedule_time after 9999",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=253402300800)),
        "schedule_time",
    ),
    ("negative delay", dict(delay=duration_pb2.Duration(seconds=-1)), "delay"),
    ("delay over 100 years", dict(delay=duration_pb2.Duration(seconds=36501 * 86400)), "delay"),
    (
        "after the deadline",
        dict(schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_200)),
        "schedule_time",
    ),
    ("delay past the deadline", dict(delay=duration_pb2.Duration(seconds=10**9)), "delay"),
    ("at the deadline", dict(schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_100)), "schedule_time"),
]


@pytest.mark.parametrize("label,fields,field", BAD_RESCHEDULES, ids=[b[0] for b in BAD_RESCHEDULES])
async def test_bad_reschedule_is_invalid_argument_with_the_field_and_changes_nothing(
    env, label, fields, field
):
    stub, engine, _ = env
    job = await create(
        stub,
        schedule_time=timestamp_pb2.Timestamp(seconds=2_000_000_000),
        deadline=timestamp_pb2.Timestamp(seconds=2_000_000_100),
    )
    before = await row(engine, job_id(job))
    assert await rpc_error(stub.RescheduleJob(js.RescheduleJobRequest(name=job.name, **fields))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD",
        [field],
    )
    assert await row(engine, job_id(job)) == before


# -- SDK and CLI against the real API ---------------------------------------------------------------


async def test_sdk_and_cli_cancel_and_reschedule(env):
    from typer.testing import CliRunner

    from gnomon.cli.main import app
    from gnomon.sdk import AsyncClient, Client, GnomonError

    stub, engine, address = env
    runner = CliRunner()

    async def cli(*args) -> tuple[int, str]:
        # the sync client blocks: run it in a thread, the API serves on this loop
        r = await asyncio.to_thread(runner.invoke, app, ["job", *args, "--api", address])
        return r.exit_code, r.output.strip()

    job = await create(stub, delay=duration_pb2.Duration(seconds=3600))
    code, out = await cli("reschedule", job.name, "--at", "2100-01-01T00:00:00Z", "--expected-version", "1")
    assert (code, out) == (0, "2100-01-01T00:00:00Z")
    code, out = await cli("reschedule", job_id(job).hex, "--in", "2h", "--expected-version", "1")
    assert code == 1 and "FAILED_PRECONDITION" in out
    assert (await cli("reschedule", job.name))[0] == 2  # neither --at nor --in
    code, out = await cli("reschedule", job.name, "--at", "1969-12-31T00:00:00Z")
    assert code == 1 and "schedule_time" in out
    assert await cli("cancel", str(job_id(job))) == (0, "cancelled")  # a bare id: default namespace
    assert await cli("cancel", job.name) == (0, "already finished: CANCELLED")

    [running_job], _ = await running(stub, engine, 1)
    assert await cli("cancel", running_job.name, "--expected-version", "3") == (0, "cancel requested")

    def sync_calls():
        with Client(api=address) as c:
            j = c.create_job("q", delay=60)
            moved = c.reschedule_job(j.name, delay=120, expected_version=1)
            try:
                c.reschedule_job(j.name, schedule_time=datetime(2100, 1, 1, tzinfo=UTC), expected_version=1)
            except GnomonError as e:
                stale = (e.code, e.reason)
            return moved, c.cancel_job(j.id), c.cancel_job(j.name), stale

    moved, first, again, stale = await asyncio.to_thread(sync_calls)
    assert moved.version == 2 and moved.state == "SCHEDULED"
    assert (first[0], first[1].state, first[1].version) == ("CANCELLED", "CANCELLED", 3)
    assert (again[0], again[1].state) == ("ALREADY_FINISHED", "CANCELLED")
    assert stale == (grpc.StatusCode.FAILED_PRECONDITION, "STALE_VERSION")

    async with AsyncClient(api=address) as ac:
        j = await ac.create_job("q", delay=60)
        at = datetime(2100, 1, 1, 0, 0, 1, tzinfo=UTC)
        assert (await ac.reschedule_job(j.id, schedule_time=at)).schedule_time == at
        outcome, cancelled = await ac.cancel_job(j.name, expected_version=2)
        assert (outcome, cancelled.state) == ("CANCELLED", "CANCELLED")
        with pytest.raises(ValueError):
            await ac.reschedule_job(j.name, schedule_time=at, delay=1)


# -- end to end -------------------------------------------------------------------------------------


# Each way of telling the worker, alone: the dispatcher's push (workers heartbeat only every 30 s),
# or the heartbeat ack (the push looks only every 60 s, after its first, empty pass at start).
DELIVERY = {
    "push": {"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "30"},
    "heartbeat": {
        "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
        "GNOMON_DISPATCHER_CANCEL_PUSH_INTERVAL_S": "60",
    },
}


@pytest.mark.parametrize("delivery", list(DELIVERY))
def test_cancel_reaches_a_running_handler_through_real_processes(
    pg_server, migrated_template, tmp_path, delivery
):
    """api, dispatcher, planner, reaper and a worker as processes; the handler loops until
    ``ctx.cancelled`` and raises Cancelled: the job ends CANCELLED within 10 s of CancelJob."""
    from gnomon.sdk import Client

    with running_suite(pg_server, migrated_template, tmp_path, env=DELIVERY[delivery]) as s:
        s.start_worker(
            ["cancelme"],
            "gnomon_test_handlers:wait_for_cancel",
            concurrency=2,
            env={"PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))},
        )
        with Client(api=s.api_address) as c:
            job = c.create_job("cancelme", b"", lease_duration=120)
            wait_for(lambda: c.get_job(job.name).state == "RUNNING", 30, "the job to run")
            t0 = time.monotonic()
            outcome, j = c.cancel_job(job.name)
            assert (outcome, j.state) == ("CANCEL_REQUESTED", "RUNNING")
            done = wait_for(lambda: (x := c.get_job(job.name)).state == "CANCELLED" and x, 10, "CANCELLED")
            assert time.monotonic() - t0 < 10
            assert done.attempt == 1 and done.failure_class == "PERMANENT"
            assert c.cancel_job(job.name)[0] == "ALREADY_FINISHED"
        log = Path(os.path.join(s.log_dir, "dispatcher-0.log")).read_text()
        assert ("pushing cancellation of 1 attempt(s)" in log) == (delivery == "push")
