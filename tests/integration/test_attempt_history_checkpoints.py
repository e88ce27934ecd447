"""Attempt history (``JobService.ListJobAttempts``) over real gRPC and progress checkpoints through the
dispatcher's write path, against a real PostgreSQL.

Attempts are driven with the data-plane storage functions (claim, accept, complete, reap) exactly as
the dispatcher and reaper call them; the checkpoint path goes through the dispatcher's
``WorkerServicer`` and ``WriteBatcher`` (the same objects ``gnomon dispatcher`` runs), minus the stream.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from sqlalchemy import select, update

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1.failure_class_pb2 import (
    FAILURE_CLASS_AMBIGUOUS,
    FAILURE_CLASS_TRANSIENT,
    FAILURE_CLASS_UNSPECIFIED,
)
from gnomon.common.domain.attempts import AttemptKey, Claimed, Result
from gnomon.common.storage import checkpoints as cps
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import reaping
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon.dispatcher.relay import assignment
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.writes import WriteBatcher
from gnomon_attempt_support import TOKEN, claim, new_job
from gnomon_test_support import job_service, own_shards, serving


@pytest.fixture
async def engine(engine):
    """The test database's engine (conftest), shard 0 owned by "A" with fencing token ``TOKEN``."""
    await own_shards(engine, TOKEN)
    return engine


@pytest.fixture
async def api(engine):
    async with serving(job_service(engine)) as (channel, _):
        yield jg.JobServiceStub(channel)


async def start(engine, jid, worker="w1", namespace="default") -> tuple[Claimed, AttemptKey]:
    c1 = await claim(engine, jid, namespace)
    key = AttemptKey(jid, c1.attempt, c1.version, c1.token)
    assert (jid, c1.attempt) in await run_transaction(engine, lambda c: lease_store.accept(c, [key], worker))
    return c1, key


async def finish(engine, key, ok: bool, failure_class="TRANSIENT", error=""):
    res = await run_transaction(
        engine,
        lambda c: result_store.complete(
            c,
            [Result(key=key, succeeded=ok, failure_class=failure_class, error=error)],
            retry_delay_s=lambda r, a: 0,
        ),
    )
    assert res == {(key.job_id, key.attempt): ""}


async def lose(engine, jid):
    async with engine.begin() as c:
        await c.execute(
            update(attempts)
            .where(attempts.c.job_id == jid, attempts.c.state == "RUNNING")
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )
    await run_transaction(
        engine,
        lambda c: reaping.reap_lost_leases(
            c, region="local", skew_margin_s=0.5, limit=100, retry_delay_s=lambda a: 0
        ),
    )


def reason(err: grpc.aio.AioRpcError) -> str:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    for d in rpc_status.from_call(err).details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            return info.reason
    return ""


# -- attempt history ------------------------------------------------------------------------------


async def test_history_lists_every_attempt_with_worker_token_state_and_failure(engine, api):
    jid = await new_job(engine)
    name = f"namespaces/default/jobs/{jid}"
    assert list((await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=name))).attempts) == []
    _, k1 = await start(engine, jid, worker="w1")
    await finish(engine, k1, False, "TRANSIENT", "connection reset")
    await start(engine, jid, worker="w2")
    await lose(engine, jid)  # lease expired while running
    c3, k3 = await start(engine, jid, worker="w3")
    resp = await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=name))
    a1, a2, a3 = resp.attempts
    assert resp.next_page_token == ""
    assert [a.name for a in resp.attempts] == [f"{name}/attempts/{n}" for n in (1, 2, 3)]
    assert (
        a1.attempt,
        a1.state,
        a1.worker_id,
        a1.dispatcher_id,
        a1.fencing_token,
        a1.failure_class,
        a1.error,
    ) == (1, job_pb2.ATTEMPT_STATE_FAILED, "w1", "disp-A", TOKEN, FAILURE_CLASS_TRANSIENT, "connection reset")
    assert (a2.state, a2.worker_id, a2.failure_class) == (
        job_pb2.ATTEMPT_STATE_LOST,
        "w2",
        FAILURE_CLASS_AMBIGUOUS,
    )
    assert "outcome unknown" in a2.error
    assert (a3.state, a3.worker_id, a3.version) == (job_pb2.ATTEMPT_STATE_RUNNING, "w3", c3.version)
    for a in (a1, a2):
        assert a.HasField("claim_time") and a.HasField("accept_time") and a.HasField("finish_time")
        assert a.claim_time.ToDatetime() <= a.accept_time.ToDatetime() <= a.finish_time.ToDatetime()
    assert a3.HasField("lease_expire_time") and not a3.HasField("finish_time")
    await finish(engine, k3, True)
    resp = await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=name))
    assert (
        resp.attempts[2].state == job_pb2.ATTEMPT_STATE_SUCCEEDED
        and resp.attempts[2].failure_class == FAILURE_CLASS_UNSPECIFIED
    )


async def test_history_pages_and_rejects_foreign_tokens(engine, api):
    jid = await new_job(engine, max_attempts=3)  # 3 failures: DEAD, no 4th attempt
    for _ in range(3):
        _, k = await start(engine, jid)
        await finish(engine, k, False)
    other = await new_job(engine)
    await start(engine, other)
    name = f"namespaces/default/jobs/{jid}"
    seen, token = [], ""
    while True:
        resp = await api.ListJobAttempts(
            js.ListJobAttemptsRequest(parent=name, page_size=2, page_token=token)
        )
        seen += [a.attempt for a in resp.attempts]
        token = resp.next_page_token
        if not token:
            break
    assert seen == [1, 2, 3]
    first = await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=name, page_size=1))
    with pytest.raises(grpc.aio.AioRpcError) as e:  # a token of another job
        await api.ListJobAttempts(
            js.ListJobAttemptsRequest(
                parent=f"namespaces/default/jobs/{other}", page_token=first.next_page_token
            )
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    big = await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=name, page_size=5000))  # coerced to 100
    assert [a.attempt for a in big.attempts] == [1, 2, 3]


@pytest.mark.parametrize(
    "parent,code,why",
    [
        ("namespaces/default/jobs/not-a-uuid", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        ("jobs/123", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        (
            "namespaces/default/jobs/3c766b39-f6fb-4492-97f6-8e7e041e4db9",
            grpc.StatusCode.NOT_FOUND,
            "JOB_NOT_FOUND",
        ),
    ],
)
async def test_history_bad_parent(api, parent, code, why):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=parent))
    assert (e.value.code(), reason(e.value)) == (code, why)


async def test_history_of_another_namespace_is_not_found(engine, api):
    jid = await new_job(engine, namespace="tenant-b")
    await start(engine, jid, namespace="tenant-b")
    ok = await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=f"namespaces/tenant-b/jobs/{jid}"))
    assert len(ok.attempts) == 1
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await api.ListJobAttempts(js.ListJobAttemptsRequest(parent=f"namespaces/default/jobs/{jid}"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await api.ListJobAttempts(
            js.ListJobAttemptsRequest(parent=f"namespaces/default/jobs/{jid}", page_size=-1)
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# -- checkpoints: storage -------------------------------------------------------------------------


async def saved(engine, jid) -> bytes | None:
    async with engine.connect() as c:
        return (await c.execute(select(jobs.c.checkpoint).where(jobs.c.id == jid))).scalar_one()


async def save(engine, *items: cps.CheckpointWrite):
    return await run_transaction(engine, lambda c: cps.save_checkpoints(c, list(items)))


async def test_checkpoint_is_saved_only_for_the_running_attempt_under_its_token(engine):
    jid = await new_job(engine)
    c1, k1 = await start(engine, jid)
    assert await save(engine, cps.CheckpointWrite(jid, 1, TOKEN + 1, b"stale token")) == set()
    assert await save(
        engine, cps.CheckpointWrite(jid, 1, TOKEN, b"a"), cps.CheckpointWrite(jid, 1, TOKEN, b"b")
    ) == {(jid, 1, TOKEN)}
    assert await saved(engine, jid) == b"b"  # the last of one batch wins
    await finish(engine, k1, False)
    assert await save(engine, cps.CheckpointWrite(jid, 1, TOKEN, b"after result")) == set()
    c2 = await claim(engine, jid)
    assert c2.attempt == 2 and c2.checkpoint == b"b"  # handed to the next attempt
    assert assignment(c2).checkpoint == b"b"
    assert await save(engine, cps.CheckpointWrite(jid, 2, TOKEN, b"queued")) == set()  # not accepted yet
    key2 = AttemptKey(jid, 2, c2.version, c2.token)
    await run_transaction(engine, lambda c: lease_store.accept(c, [key2], "w2"))
    assert await save(engine, cps.CheckpointWrite(jid, 1, TOKEN, b"old attempt")) == set()
    assert await save(engine, cps.CheckpointWrite(jid, 2, TOKEN, b"")) == {(jid, 2, TOKEN)}
    assert await saved(engine, jid) is None  # empty clears it
    with pytest.raises(ValueError):
        await save(engine, cps.CheckpointWrite(jid, 2, TOKEN, b"x" * (cps.MAX_CHECKPOINT_BYTES + 1)))


# -- checkpoints: the dispatcher's stream handler and write batcher -----------------------------


async def test_dispatcher_saves_checkpoints_and_refuses_oversized_ones_whole(engine):
    jid = await new_job(engine)
    c1, _ = await start(engine, jid, worker="w1")
    writes = WriteBatcher(engine, max_batch=100, flushers=2)
    writes.start()
    registry = SessionRegistry()
    servicer = WorkerServicer(
        registry,
        writes,
        dispatcher_id="disp-A",
        region="local",
        heartbeat_interval_s=1,
        on_credits=lambda: None,
    )
    s = registry.add("w1", "default", ["q"], 1)
    ref = wpb.AttemptRef(
        job=f"namespaces/default/jobs/{jid}", attempt=1, version=c1.version, fencing_token=TOKEN
    )
    stale = wpb.AttemptRef(job=ref.job, attempt=1, version=c1.version, fencing_token=TOKEN - 1)
    try:
        servicer._checkpoints(
            s,
            [
                wpb.Checkpoint(attempt=ref, data=b"x" * (64 * 1024 + 1)),
                wpb.Checkpoint(attempt=ref, data=b"step=7"),
                wpb.Checkpoint(attempt=stale, data=b"stale"),
            ],
        )
        acks = []
        while len(acks) < 3:
            msg = await s.out.get()
            acks += list(msg.acks.acks)
        by = {(a.attempt.fencing_token, a.ok, a.reason) for a in acks}
        assert all(a.kind == wpb.ACK_KIND_CHECKPOINT for a in acks)
        assert by == {
            (TOKEN, False, "CHECKPOINT_TOO_LARGE"),
            (TOKEN, True, ""),
            (TOKEN - 1, False, "STALE_ATTEMPT"),
        }
        assert await saved(engine, jid) == b"step=7"  # the oversized one was not even truncated in
    finally:
        await writes.stop()
