"""Named queries for the job resource (create, get, list). All instants come from the database clock.

Every function takes an open :class:`AsyncConnection` inside a transaction (see
:func:`gnomon.common.storage.engine.run_transaction`) and returns plain mappings (column -> value).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Integer, Interval, and_, bindparam, func, insert, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.errors import AlreadyExists, FieldViolation, InvalidArgument, NotFound
from gnomon.common.retry import DEFAULT_POLICY, RetryPolicy
from gnomon.common.states import SCHEDULED
from gnomon.common.storage.schema import jobs


@dataclass(frozen=True)
class NewJob:
    """A validated create request. ``schedule_at`` (UTC instant) and ``delay`` are mutually exclusive;
    both ``None`` means "now" by the database clock. ``lease`` is the per-attempt lease duration."""

    id: uuid.UUID
    namespace: str
    region: str
    shard: int
    queue: str
    payload: bytes
    schedule_at: datetime | None
    delay: timedelta | None
    deadline: datetime | None
    max_attempts: int
    idempotency_key: str
    lease: timedelta
    request_id: uuid.UUID | None
    request_hash: str | None
    idempotent: bool = False
    retry: RetryPolicy = DEFAULT_POLICY
    start_to_close: timedelta | None = None


def _ms(d: timedelta | None) -> int | None:
    """A span in whole milliseconds (None stays None)."""
    return None if d is None else int(d.total_seconds() * 1000)


def policy_columns(p: RetryPolicy) -> dict:
    """The ``jobs`` columns storing a retry policy."""
    return dict(
        retry_initial_ms=round(p.initial_s * 1000),
        retry_max_ms=round(p.max_s * 1000),
        retry_multiplier=float(p.multiplier),
        retry_jitter=float(p.jitter),
        max_age_ms=None if p.max_age_s is None else round(p.max_age_s * 1000),
        non_retryable_errors=json.dumps(list(p.non_retryable_errors)) if p.non_retryable_errors else None,
    )


#: The ``jobs`` columns of the retry policy (read with :func:`policy_of`).
POLICY_COLS = (
    jobs.c.retry_initial_ms,
    jobs.c.retry_max_ms,
    jobs.c.retry_multiplier,
    jobs.c.retry_jitter,
    jobs.c.max_age_ms,
    jobs.c.non_retryable_errors,
)


def policy_of(row) -> RetryPolicy:
    """The retry policy stored on a ``jobs`` row (a mapping with the policy columns)."""
    names = row["non_retryable_errors"]
    return RetryPolicy(
        initial_s=row["retry_initial_ms"] / 1000,
        max_s=row["retry_max_ms"] / 1000,
        multiplier=row["retry_multiplier"],
        jitter=row["retry_jitter"],
        max_age_s=None if row["max_age_ms"] is None else row["max_age_ms"] / 1000,
        non_retryable_errors=tuple(json.loads(names)) if names else (),
    )


def shard_of(job_id: uuid.UUID, shards: int) -> int:
    """The shard of a job: the first 8 bytes of its UUID, big-endian, mod ``shards``."""
    return int.from_bytes(job_id.bytes[:8], "big") % shards


_SCHEDULED_AT = func.coalesce(
    bindparam("p_at", type_=jobs.c.scheduled_at.type), func.now() + bindparam("p_delay", type_=Interval)
)
#: Prebuilt (its compiled form and cache key are reused on every call).
INSERT_JOB = insert(jobs).values(scheduled_at=_SCHEDULED_AT).returning(*jobs.c)
#: With a request_id: a repeat is a no-op (the PostgreSQL ON CONFLICT construct is not cacheable; rare path).
INSERT_JOB_IDEMPOTENT = (
    pg_insert(jobs)
    .values(scheduled_at=_SCHEDULED_AT)
    .on_conflict_do_nothing(index_elements=["namespace", "request_id"])
    .returning(*jobs.c)
)


async def insert_job(conn: AsyncConnection, new: NewJob) -> tuple[dict, bool]:
    """Inserts a SCHEDULED job; returns ``(row, created)``.

    With a ``request_id`` already used in the namespace: the same ``request_hash`` returns the
    original row with ``created=False``; a different one raises :class:`AlreadyExists`
    (reason REQUEST_ID_REUSED). A deadline not after the schedule time raises
    :class:`InvalidArgument` (field ``deadline``), checked against the database clock.
    """
    if new.deadline is not None and new.schedule_at is None:
        # only here does the deadline depend on the database clock: check it (one extra query)
        due = (await conn.execute(select(func.now() + (new.delay or timedelta(0))))).scalar_one()
        if new.deadline <= due:
            raise InvalidArgument([FieldViolation("deadline", "must be after the schedule time")])
    elif new.deadline is not None and new.deadline <= new.schedule_at:
        raise InvalidArgument([FieldViolation("deadline", "must be after the schedule time")])
    values = dict(
        id=new.id,
        namespace=new.namespace,
        region=new.region,
        shard=new.shard,
        queue=new.queue,
        payload=new.payload,
        state=SCHEDULED,
        version=1,
        deadline=new.deadline,
        max_attempts=new.max_attempts,
        attempt=0,
        idempotency_key=new.idempotency_key,
        lease_ms=int(new.lease.total_seconds() * 1000),
        request_id=new.request_id,
        request_hash=new.request_hash,
        idempotent=new.idempotent,
        start_to_close_ms=_ms(new.start_to_close),
        **policy_columns(new.retry),
    )
    # scheduled_at is the given instant or now() + delay, by the database clock, in the INSERT itself
    values.update(p_at=new.schedule_at, p_delay=new.delay or timedelta(0))
    stmt = INSERT_JOB if new.request_id is None else INSERT_JOB_IDEMPOTENT
    row = (await conn.execute(stmt, values)).mappings().first()
    if row is not None:
        return dict(row), True
    existing = (
        (
            await conn.execute(
                select(jobs).where(jobs.c.namespace == new.namespace, jobs.c.request_id == new.request_id)
            )
        )
        .mappings()
        .one()
    )
    if existing["request_hash"] != new.request_hash:
        raise AlreadyExists(
            f"request_id {new.request_id} was already used with a different request",
            metadata={"job": f"namespaces/{new.namespace}/jobs/{existing['id']}"},
        )
    return dict(existing), False


async def insert_jobs(conn: AsyncConnection, batch: list[NewJob]) -> list[dict]:
    """Inserts a batch atomically; returns the rows in input order.

    Plain jobs go in one multi-row INSERT whose ``scheduled_at`` is the given instant or
    ``now() + delay`` (database clock). Jobs with a ``request_id`` (idempotent) or with a deadline
    relative to the database clock go through :func:`insert_job`, so a reused ``request_id`` with a
    different request raises :class:`AlreadyExists` and the caller's transaction rolls back the batch.
    """
    out: list[dict | None] = [None] * len(batch)
    plain = []
    for i, n in enumerate(batch):
        if n.request_id is not None or (n.deadline is not None and n.schedule_at is None):
            out[i], _ = await insert_job(conn, n)
        else:
            plain.append(i)
    if plain:
        rows = [
            dict(
                id=n.id,
                namespace=n.namespace,
                region=n.region,
                shard=n.shard,
                queue=n.queue,
                payload=n.payload,
                state=SCHEDULED,
                version=1,
                p_at=n.schedule_at,
                p_delay_ms=int((n.delay or timedelta(0)).total_seconds() * 1000),
                deadline=n.deadline,
                max_attempts=n.max_attempts,
                attempt=0,
                idempotency_key=n.idempotency_key,
                lease_ms=int(n.lease.total_seconds() * 1000),
                idempotent=n.idempotent,
                start_to_close_ms=_ms(n.start_to_close),
                **policy_columns(n.retry),
            )
            for n in (batch[i] for i in plain)
        ]
        stmt = insert(jobs).values(
            scheduled_at=func.coalesce(
                bindparam("p_at", type_=jobs.c.scheduled_at.type),
                func.now() + bindparam("p_delay_ms", type_=Integer) * timedelta(milliseconds=1),
            )
        )
        await conn.execute(stmt, rows)
        got = (
            (await conn.execute(select(jobs).where(jobs.c.id.in_([batch[i].id for i in plain]))))
            .mappings()
            .all()
        )
        by_id = {r["id"]: dict(r) for r in got}
        for i in plain:
            out[i] = by_id[batch[i].id]
    return out  # type: ignore[return-value]


async def get_job(conn: AsyncConnection, namespace: str, job_id: uuid.UUID) -> dict:
    """The job row; raises :class:`NotFound` (JOB_NOT_FOUND) if absent from that namespace."""
    row = (
        (await conn.execute(select(jobs).where(jobs.c.namespace == namespace, jobs.c.id == job_id)))
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound(f"job namespaces/{namespace}/jobs/{job_id} not found")
    return dict(row)


async def list_jobs(
    conn: AsyncConnection,
    namespace: str,
    *,
    state: str | None,
    queue: str | None,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> list[dict]:
    """Up to ``limit`` jobs, newest ``created_at`` first (ties by id descending), strictly after the
    keyset cursor ``after`` = (created_at, id) of the previous page's last row. The progress
    ``checkpoint`` (up to 64 KiB a job, never part of the Job resource) is not read."""
    q = select(*[c for c in jobs.c if c.key != "checkpoint"]).where(jobs.c.namespace == namespace)
    if state:
        q = q.where(jobs.c.state == state)
    if queue:
        q = q.where(jobs.c.queue == queue)
    if after is not None:
        ts, last = after
        q = q.where(or_(jobs.c.created_at < ts, and_(jobs.c.created_at == ts, jobs.c.id < last)))
    q = q.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
    return [dict(r) for r in (await conn.execute(q)).mappings()]
