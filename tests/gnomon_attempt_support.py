"""Helpers of the attempt-level tests (imported as ``gnomon_attempt_support``): jobs inserted and
claimed with the data-plane storage functions under shard 0's fencing token :data:`TOKEN`, and the
acks a ``WorkerServicer`` session receives (driven without a gRPC stream)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import select

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.domain.attempts import Claimed
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.job_view import JOB_FROM, STATE
from gnomon.common.storage.schema import attempts, jobs
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry, WorkerSession
from gnomon.dispatcher.writes import WriteBatcher
from gnomon_test_support import fenced, new_job_spec

#: The fencing token shard 0 is owned under in these tests (``own_shards(engine, TOKEN)``).
TOKEN = 11


async def new_job(engine, *, namespace="default", idempotent=True, max_attempts=5) -> uuid.UUID:
    jid = uuid.uuid4()
    new = new_job_spec(id=jid, namespace=namespace, max_attempts=max_attempts, idempotent=idempotent)
    await run_transaction(engine, lambda c: jobs_store.insert_job(c, new))
    return jid


async def claim(engine, jid, namespace="default") -> Claimed:
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[(namespace, "q")], limit=100, dispatcher_id="disp-A"),
    )
    [got] = [c for c in claimed if c.job_id == jid]
    return got


async def acks_of(s: WorkerSession, n: int = 1) -> list[wpb.Ack]:
    got: list[wpb.Ack] = []
    while len(got) < n:
        got += list((await s.out.get()).acks.acks)
    return got


async def one(s: WorkerSession) -> tuple[bool, str]:
    [a] = await acks_of(s)
    return a.ok, a.reason


async def state_of(engine, jid) -> tuple[str, str, str | None, str | None]:
    async with engine.connect() as c:
        j = (await c.execute(select(STATE).select_from(JOB_FROM).where(jobs.c.id == jid))).scalar_one()
        a = (
            await c.execute(
                select(attempts.c.state, attempts.c.owner, attempts.c.worker_id).where(
                    attempts.c.job_id == jid
                )
            )
        ).one()
    return j, a.state, a.owner, a.worker_id


@asynccontextmanager
async def dispatcher_parts(engine) -> AsyncIterator[tuple[SessionRegistry, WorkerServicer]]:
    """A dispatcher's stream side without gRPC: a ``SessionRegistry`` and a ``WorkerServicer``
    (dispatcher ``disp-A``, region ``local``) over a running ``WriteBatcher`` on ``engine``, stopped
    on exit."""
    writes = WriteBatcher(engine, max_batch=100, flushers=1)
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
    try:
        yield registry, servicer
    finally:
        await writes.stop()


#: The previous release's accept, as that release wrote it: a compare-and-set on the job row (QUEUED
#: at the dispatched attempt and version, the attempt QUEUED under that token and version) -> RUNNING,
#: version + 1, ``started_at``; then the attempt row -> RUNNING. Kept to produce the rows an older
#: release left behind, which this release must read and move on.
PREVIOUS_RELEASE_ACCEPT = (
    "UPDATE jobs SET state = 'RUNNING', version = jobs.version + 1, started_at = now() FROM attempts a "
    "WHERE jobs.id = :id AND jobs.attempt = :a AND jobs.version = :v AND jobs.state = 'QUEUED' "
    "AND a.job_id = :id AND a.attempt = :a AND a.token = :t AND a.version = :v AND a.state = 'QUEUED' "
    "RETURNING jobs.id",
    "UPDATE attempts SET state = 'RUNNING', accepted_at = now(), worker_id = :w, "
    "lease_expires_at = now() + lease_ms * interval '1 millisecond' WHERE job_id = :id AND attempt = :a",
)


async def accept_as_previous_release(conn, key, worker: str = "old") -> bool:
    """Runs :data:`PREVIOUS_RELEASE_ACCEPT` for ``key`` (an ``AttemptKey``) on ``conn`` (inside a
    transaction); whether it accepted."""
    from sqlalchemy import text

    params = {"id": key.job_id, "a": key.attempt, "v": key.version, "t": key.token, "w": worker}
    if (await conn.execute(text(PREVIOUS_RELEASE_ACCEPT[0]), params)).first() is None:
        return False
    await conn.execute(text(PREVIOUS_RELEASE_ACCEPT[1]), params)
    return True
