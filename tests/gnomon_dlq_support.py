"""Helpers for the DeadLetterService tests (test_dead_letters.py, test_dead_letter_replay.py): dead
letters made the way production makes them (:func:`make_dead`), counts and rows read back, the
database clock, and replay requests. The servicer is served by the ``api``, ``api_address`` and
``crdb_api`` fixtures of conftest.py, whose engine owns shard 0 with :data:`TOKEN`.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import timestamp_pb2
from sqlalchemy import func, select

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import jobs
from gnomon_test_support import fenced, new_job_spec

TOKEN = 7
SHARDS = 64


async def make_dead(
    engine,
    n: int,
    *,
    namespace="default",
    queue="q",
    failure_class="PERMANENT",
    error="boom",
    max_attempts=3,
    idempotent=False,
    payload=b"p",
) -> list[uuid.UUID]:
    """n jobs -> claimed (fenced), accepted by worker w1, failed with ``failure_class`` -> DEAD."""
    batch = []
    for i in range(n):
        jid = uuid.uuid4()
        batch.append(
            new_job_spec(
                id=jid,
                namespace=namespace,
                queue=queue,
                payload=payload + str(i).encode(),
                max_attempts=max_attempts,
                idempotency_key=f"key-{jid}",
                lease=timedelta(seconds=45),
                idempotent=idempotent,
            )
        )
    await run_transaction(engine, lambda c: jobs_store.insert_jobs(c, batch))
    ids = {b.id for b in batch}
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[(namespace, queue)], limit=n + 10, dispatcher_id="d1"),
    )
    keys = [AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in claimed if c.job_id in ids]
    assert len(keys) == n
    await run_transaction(engine, lambda c: lease_store.accept(c, keys, "w1"))
    results = [Result(k, succeeded=False, failure_class=failure_class, error=error) for k in keys]
    await run_transaction(engine, lambda c: result_store.complete(c, results, retry_delay_s=lambda r, a: 0))
    async with engine.connect() as c:
        states = (await c.execute(select(jobs.c.state).where(jobs.c.id.in_(list(ids))))).scalars().all()
    assert set(states) == {"DEAD"}, states
    return [b.id for b in batch]


async def count(engine, table, *where) -> int:
    async with engine.connect() as c:
        return (await c.execute(select(func.count()).select_from(table).where(*where))).scalar_one()


async def rows(engine, q):
    async with engine.connect() as c:
        return [dict(r) for r in (await c.execute(q)).mappings()]


async def db_now(engine) -> datetime:
    async with engine.connect() as c:
        return (await c.execute(select(func.now()))).scalar_one()


def ts(dt: datetime) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromDatetime(dt)
    return t


def replay_req(**kw: Any) -> pb.ReplayDeadLettersRequest:
    base: dict[str, Any] = dict(
        max_rate=100, max_jobs=1000, reason="fixed the bug", request_id=str(uuid.uuid4())
    )
    base.update(kw)
    return pb.ReplayDeadLettersRequest(**base)
