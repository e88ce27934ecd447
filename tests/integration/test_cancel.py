"""CancelJob: the API in-process over real gRPC, real PostgreSQL, and the dispatcher's storage calls
(claim, accept, heartbeat, complete, relay scan) made directly, as a dispatcher would: cancel state by
state, stale versions and bad names, races with the worker's writes; then one end-to-end run through
real processes (the cancellation reaching a running handler, by push and by heartbeat ack).

Races are forced, not hoped for: one transaction is left open holding a row lock while the
cancel runs, and the test waits (polling ``pg_stat_activity``) until the cancel is blocked on it
before committing. RescheduleJob, and the SDK and CLI for both, are in test_reschedule.py; the
shared helpers are in gnomon_cancel_support.py, the ``cancel_env`` fixture in conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from sqlalchemy import func, select, text

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon.common.domain.attempts import Result
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import outbox as outbox_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts
from gnomon.sdk import FailureClass
from gnomon_cancel_support import (
    OUT,
    TOKENS,
    attempt_row,
    cancel,
    claim,
    complete,
    create,
    decode,
    job_id,
    key,
    row,
    rpc_error,
    running,
)
from gnomon_test_support import DIALECTS, fenced, running_suite, wait_for, wait_until

dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)
env = pytest.fixture(lambda cancel_env: cancel_env)  # conftest.py: JobService through ``dialect``

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    before = await fenced(engine, TOKENS, lambda fx: outbox_store.pending_outbox(fx, exclude=set(), limit=10))
    assert {c.job_id for c in before} == set(claimed)

    resp = await cancel(stub, job)
    assert resp.outcome == OUT.CANCEL_OUTCOME_CANCELLED
    assert resp.job.state == job_pb2.JOB_STATE_CANCELLED and resp.job.version == 3
    a = await attempt_row(engine, c1.job_id)
    assert a["state"] == AttemptState.CANCELLED and a["finished_at"] is not None

    # a worker accepting the message already in flight is refused, and so is its heartbeat
    assert await run_transaction(engine, lambda c: lease_store.accept(c, [key(c1)], "W")) == {}
    assert await run_transaction(engine, lambda c: lease_store.heartbeat(c, [key(c1)])) == {}
    # the relay re-delivers only the other job
    pending = await fenced(
        engine, TOKENS, lambda fx: outbox_store.pending_outbox(fx, exclude=set(), limit=10)
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
            assert done.attempt == 1 and done.failure_class is FailureClass.PERMANENT
            assert c.cancel_job(job.name)[0] == "ALREADY_FINISHED"
        log = Path(os.path.join(s.log_dir, "dispatcher-0.log")).read_text()
        assert ("pushing cancellation of 1 attempt(s)" in log) == (delivery == "push")
