"""Named queries for the job resource (create, get, list). All instants come from the database clock.

Every function takes an open :class:`AsyncConnection` inside a transaction (see
:func:`gnomon.common.storage.engine.run_transaction`) and returns plain mappings (column -> value).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import Integer, Interval, and_, bindparam, func, insert, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import NewJob
from gnomon.common.errors import AlreadyExists, FieldViolation, InvalidArgument, NotFound
from gnomon.common.storage.schema import jobs

#: The ``jobs`` columns of the retry policy (read with :func:`policy_of`).
POLICY_COLS = (
    jobs.c.retry_initial_ms,
    jobs.c.retry_max_ms,
    jobs.c.retry_multiplier,
    jobs.c.retry_jitter,
    jobs.c.max_age_ms,
    jobs.c.non_retryable_errors,
)


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
    values: dict[str, object] = dict(new.row())
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
            {
                **n.row(),
                "p_at": n.schedule_at,
                "p_delay_ms": int((n.delay or timedelta(0)).total_seconds() * 1000),
            }
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
