"""Named queries for the job resource (create, get, list). All instants come from the database clock.

Every function takes an open :class:`AsyncConnection` inside a transaction (see
:func:`gnomon.common.storage.engine.run_transaction`) and returns plain mappings (column -> value).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Interval, Select, and_, bindparam, func, insert, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import NewJob
from gnomon.common.errors import AlreadyExists, FieldViolation, InvalidArgument, NotFound
from gnomon.common.names import job_name
from gnomon.common.pagination import rows_within_budget
from gnomon.common.storage import raw
from gnomon.common.storage.batches import unnest_rows
from gnomon.common.storage.job_view import JOB_FROM, derived_columns, state_filter
from gnomon.common.storage.schema import jobs
from gnomon.common.storage.statements import builder, named

#: The ``jobs`` columns of the retry policy (read with :func:`gnomon.common.domain.jobs.policy_of`).
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
#: The columns of :meth:`NewJob.row` (a job created by a client: no occurrence, no given
#: ``scheduled_at``), each bound by name in :data:`INSERT_JOB` and :data:`INSERT_JOB_IDEMPOTENT`.
NEW_JOB_COLUMNS = (
    "id",
    "namespace",
    "region",
    "shard",
    "queue",
    "payload",
    "state",
    "version",
    "attempt",
    "deadline",
    "max_attempts",
    "idempotency_key",
    "lease_ms",
    "request_id",
    "request_hash",
    "idempotent",
    "start_to_close_ms",
    "retry_initial_ms",
    "retry_max_ms",
    "retry_multiplier",
    "retry_jitter",
    "max_age_ms",
    "non_retryable_errors",
    "trace_context",
)
_NEW_JOB_VALUES = {
    **{c: bindparam(c, type_=jobs.c[c].type) for c in NEW_JOB_COLUMNS},
    "scheduled_at": _SCHEDULED_AT,
}
INSERT_JOB = named(
    __name__,
    "INSERT_JOB",
    """Inserts one ``jobs`` row: the columns :data:`NEW_JOB_COLUMNS` (each a parameter of its name)
    and ``scheduled_at`` = ``p_at`` (an instant) or, when NULL, ``now() + p_delay`` (an interval,
    database clock); returns the whole row. Run below SQLAlchemy's execution layer
    (:func:`gnomon.common.storage.raw.fetch`, prepared): one CreateJob's insert.""",
    insert(jobs).values(_NEW_JOB_VALUES).returning(*jobs.c),
)
INSERT_JOB_IDEMPOTENT = named(
    __name__,
    "INSERT_JOB_IDEMPOTENT",
    """As ``INSERT_JOB`` for a job with a ``request_id``: a repeat in the namespace inserts nothing
    and returns no row (``ON CONFLICT (namespace, request_id) WHERE request_id IS NOT NULL DO
    NOTHING``: the arbiter is the partial unique index ``uq_jobs_request_id``).""",
    pg_insert(jobs)
    .values(_NEW_JOB_VALUES)
    .on_conflict_do_nothing(
        index_elements=["namespace", "request_id"], index_where=jobs.c.request_id.is_not(None)
    )
    .returning(*jobs.c),
)


def _build_insert_jobs() -> Any:
    t = unnest_rows(
        "t",
        **{c: jobs.c[c].type for c in NEW_JOB_COLUMNS},
        p_at=jobs.c.scheduled_at.type,
        p_delay_ms=Integer,
    )
    scheduled_at = func.coalesce(t.c.p_at, func.now() + t.c.p_delay_ms * timedelta(milliseconds=1))
    return (
        insert(jobs)
        .from_select(
            [*NEW_JOB_COLUMNS, "scheduled_at"], select(*[t.c[c] for c in NEW_JOB_COLUMNS], scheduled_at)
        )
        .returning(*jobs.c)
    )


INSERT_JOBS = named(
    __name__,
    "INSERT_JOBS",
    """Inserts a batch of ``jobs`` rows in one statement: one array parameter per column of
    :data:`NEW_JOB_COLUMNS` (``t_<column>``) plus ``t_p_at`` (instants or NULLs) and ``t_p_delay_ms``
    (ints), ``scheduled_at`` = ``p_at`` or, when NULL, ``now() + p_delay_ms`` milliseconds (database
    clock); returns the whole rows. Run below SQLAlchemy's execution layer
    (:func:`gnomon.common.storage.raw.fetch`): ~16 ms of client CPU for 500 jobs, against ~38 ms for
    an executemany of one INSERT per row plus a query reading them back (bench/README.md).""",
    _build_insert_jobs(),
)


@builder(delay=timedelta(seconds=1))
def due_at_stmt(delay: timedelta) -> Select[tuple[datetime]]:
    """Reads ``now() + delay`` by the database clock (one timestamptz; ``delay`` a timedelta)."""
    return select(func.now() + delay)


@builder(namespace="ns", request_id=uuid.UUID(int=1))
def job_by_request_stmt(namespace: str, request_id: uuid.UUID) -> Select[Any]:
    """The ``jobs`` row created in ``namespace`` with ``request_id``."""
    return select(jobs).where(jobs.c.namespace == namespace, jobs.c.request_id == request_id)


GET_JOB = named(
    __name__,
    "GET_JOB",
    """The ``jobs`` row ``p_id`` (a UUID) if it is in namespace ``p_namespace``, every column, with
    ``state``, ``version`` and ``started_at`` as a client sees them (derived from the current
    attempt: :mod:`gnomon.common.storage.job_view`). Run below SQLAlchemy's execution layer
    (:func:`gnomon.common.storage.raw.fetch`, prepared); GetJob runs it alone in autocommit.""",
    select(*derived_columns(jobs.c))
    .select_from(JOB_FROM)
    .where(jobs.c.namespace == bindparam("p_namespace"), jobs.c.id == bindparam("p_id")),
)


def inserts_in_one_statement(new: NewJob) -> bool:
    """Whether :func:`insert_job` runs exactly one statement for ``new`` (no ``request_id`` to look
    up, no deadline to check against the database clock), so it may run as its own transaction
    (:func:`gnomon.common.storage.engine.run_transaction` ``single_statement``)."""
    return new.request_id is None and not (new.deadline is not None and new.schedule_at is None)


async def insert_job(conn: AsyncConnection, new: NewJob) -> tuple[dict[str, Any], bool]:
    """Inserts a SCHEDULED job; returns ``(row, created)``.

    With a ``request_id`` already used in the namespace: the same ``request_hash`` returns the
    original row with ``created=False``; a different one raises :class:`AlreadyExists`
    (reason REQUEST_ID_REUSED). A deadline not after the schedule time raises
    :class:`InvalidArgument` (field ``deadline``), checked against the database clock.
    """
    if new.deadline is not None and new.schedule_at is None:
        # only here does the deadline depend on the database clock: check it (one extra query)
        due = (await conn.execute(due_at_stmt(new.delay or timedelta(0)))).scalar_one()
        if new.deadline <= due:
            raise InvalidArgument([FieldViolation("deadline", "must be after the schedule time")])
    elif new.deadline is not None and new.schedule_at is not None and new.deadline <= new.schedule_at:
        raise InvalidArgument([FieldViolation("deadline", "must be after the schedule time")])
    values: dict[str, object] = dict(new.row())
    # scheduled_at is the given instant or now() + delay, by the database clock, in the INSERT itself
    values.update(p_at=new.schedule_at, p_delay=new.delay or timedelta(0))
    stmt = INSERT_JOB if new.request_id is None else INSERT_JOB_IDEMPOTENT
    # below SQLAlchemy's execution layer, prepared: the one statement of every CreateJob
    # (bench/README.md, "CreateJob per call")
    got = await raw.fetch(conn, stmt, values, mappings=True)
    if got:
        return got[0], True
    assert new.request_id is not None  # INSERT_JOB always returns its row
    existing = (await conn.execute(job_by_request_stmt(new.namespace, new.request_id))).mappings().one()
    if existing["request_hash"] != new.request_hash:
        raise AlreadyExists(
            f"request_id {new.request_id} was already used with a different request",
            metadata={"job": job_name(new.namespace, existing["id"])},
        )
    return dict(existing), False


async def insert_jobs(conn: AsyncConnection, batch: list[NewJob]) -> list[dict[str, Any]]:
    """Inserts a batch atomically; returns the rows in input order.

    Plain jobs go in one statement (:data:`INSERT_JOBS`, arrays unnested) whose ``scheduled_at`` is
    the given instant or ``now() + delay`` (database clock), returning their rows. Jobs with a ``request_id`` (idempotent) or with a deadline
    relative to the database clock go through :func:`insert_job`, so a reused ``request_id`` with a
    different request raises :class:`AlreadyExists` and the caller's transaction rolls back the batch.
    """
    out: dict[int, dict[str, Any]] = {}
    plain = []
    for i, n in enumerate(batch):
        if not inserts_in_one_statement(n):  # needs its own statements (see insert_job)
            out[i], _ = await insert_job(conn, n)
        else:
            plain.append(i)
    if plain:
        news = [batch[i] for i in plain]
        rows = [n.row() for n in news]
        params: dict[str, list[Any]] = {f"t_{c}": [r[c] for r in rows] for c in NEW_JOB_COLUMNS}  # type: ignore[literal-required]
        params["t_p_at"] = [n.schedule_at for n in news]
        params["t_p_delay_ms"] = [int((n.delay or timedelta(0)).total_seconds() * 1000) for n in news]
        # RETURNING order is not promised for INSERT ... SELECT: match the rows by id
        by_id = {r["id"]: r for r in await raw.fetch(conn, INSERT_JOBS, params, mappings=True)}
        for i in plain:
            out[i] = by_id[batch[i].id]
    return [out[i] for i in range(len(batch))]


async def get_job(conn: AsyncConnection, namespace: str, job_id: uuid.UUID) -> dict[str, Any]:
    """The job row as a client sees it (``state``, ``version``, ``started_at`` derived from the current
    attempt, :mod:`gnomon.common.storage.job_view`); raises :class:`NotFound` (JOB_NOT_FOUND) if
    absent from that namespace."""
    rows = await raw.fetch(conn, GET_JOB, {"p_namespace": namespace, "p_id": job_id}, mappings=True)
    if not rows:
        raise NotFound(f"job namespaces/{namespace}/jobs/{job_id} not found")
    row: dict[str, Any] = rows[0]
    return row


#: What a listing reads of a ``jobs`` row: every column but ``payload`` and ``checkpoint``, plus
#: ``payload_bytes`` (the payload's length); payloads are read afterwards for the rows within the
#: reply's byte budget only (:func:`budget_payloads`). ``state``, ``version`` and ``started_at`` are
#: derived from the current attempt (:mod:`gnomon.common.storage.job_view`): select ``FROM JOB_FROM``.
#: ``STORED_LISTED_COLUMNS``: the same as stored, for readers of finished jobs only (dead letters).
STORED_LISTED_COLUMNS = [c for c in jobs.c if c.key not in ("payload", "checkpoint")] + [
    func.octet_length(jobs.c.payload).label("payload_bytes")
]
LISTED_COLUMNS = derived_columns(STORED_LISTED_COLUMNS)


@builder(namespace="ns", ids=[uuid.UUID(int=1)])
def payloads_stmt(namespace: str, ids: list[uuid.UUID]) -> Select[Any]:
    """``(id, payload)`` of the jobs ``ids`` of ``namespace`` (at most ``len(ids)`` rows)."""
    return select(jobs.c.id, jobs.c.payload).where(jobs.c.namespace == namespace, jobs.c.id.in_(ids))


async def budget_payloads(
    conn: AsyncConnection, rows: list[dict[str, Any]], *, size: int, budget_bytes: int
) -> int:
    """Byte budget at the source: of listing ``rows`` (read with :data:`LISTED_COLUMNS`, so with
    ``payload_bytes`` and no payload), finds how many of the first ``size`` fit in a reply of
    ``budget_bytes`` (:func:`gnomon.common.pagination.rows_within_budget`), reads the payloads of
    those rows only (one query) into their ``payload`` and returns that count ``k``. Rows after
    ``k`` keep no payload: the caller returns ``k`` rows and continues after them. A row whose job
    was deleted meanwhile gets an empty payload."""
    k = rows_within_budget([r["payload_bytes"] or 0 for r in rows], size, budget_bytes)
    if k:
        by_ns: dict[str, list[uuid.UUID]] = {}
        for r in rows[:k]:
            by_ns.setdefault(r["namespace"], []).append(r["id"])
        got: dict[uuid.UUID, bytes] = {}
        for ns, ids in by_ns.items():
            got.update((i, bytes(p)) for i, p in (await conn.execute(payloads_stmt(ns, ids))).all())
        for r in rows[:k]:
            r["payload"] = got.get(r["id"], b"")
    return k


@builder(namespace="ns", state="SCHEDULED", queue="q", limit=10, after=None)
def list_jobs_stmt(
    namespace: str,
    state: str | None,
    queue: str | None,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> Select[Any]:
    """Up to ``limit`` ``jobs`` rows of ``namespace`` (optionally of one ``state`` and ``queue``), as
    :data:`LISTED_COLUMNS` (no payload, no checkpoint), newest ``created_at`` first (ties by id
    descending), strictly after the keyset cursor ``after`` = (created_at, id). ``state`` is the
    state a client sees (RUNNING includes QUEUED rows whose attempt runs,
    :func:`gnomon.common.storage.job_view.state_filter`)."""
    q = select(*LISTED_COLUMNS).select_from(JOB_FROM).where(jobs.c.namespace == namespace)
    if state:
        q = q.where(state_filter(state))
    if queue:
        q = q.where(jobs.c.queue == queue)
    if after is not None:
        ts, last = after
        q = q.where(or_(jobs.c.created_at < ts, and_(jobs.c.created_at == ts, jobs.c.id < last)))
    return q.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)


async def list_jobs(
    conn: AsyncConnection,
    namespace: str,
    *,
    state: str | None,
    queue: str | None,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    budget_bytes: int | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """A page of jobs read with ``limit`` = page size + 1, newest ``created_at`` first (ties by id
    descending), strictly after the keyset cursor ``after`` = (created_at, id) of the previous
    page's last row, as ``(rows, k)``: the first ``k`` rows carry their ``payload``, read only for
    the rows within ``budget_bytes`` (:func:`budget_payloads`; None: every row of the page); the
    rows after them are dropped but one (it tells a next page exists). The caller pages ``rows``
    with page size ``k``. The progress ``checkpoint`` (up to 64 KiB a job, never part of the Job
    resource) is not read; at most about ``budget_bytes`` of payloads are held whatever ``limit``."""
    q = list_jobs_stmt(namespace, state, queue, limit, after)
    rows = [dict(r) for r in (await conn.execute(q)).mappings()]
    size = limit - 1
    k = await budget_payloads(conn, rows, size=size, budget_bytes=budget_bytes or (1 << 62))
    return rows[: k + 1], k
