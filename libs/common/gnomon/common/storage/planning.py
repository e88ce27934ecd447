"""Named queries of the planner: claiming due schedules, reading the durable overlap state, writing
occurrence jobs and decision records idempotently, and the global catch-up budget.

Idempotence (invariant 5 of docs/concepts.md): an occurrence's job id is
:func:`gnomon.common.domain.jobs.occurrence_job_id` (a UUIDv5 of
the schedule's uid and the nominal instant) and its decision record is keyed by (schedule uid,
nominal time); both are inserted ``ON CONFLICT DO NOTHING``, so replaying a planning step after a
crash, a retry or a failover writes nothing new. The high-water mark ``planned_through`` only moves
forward under the row lock taken by :func:`claim_due` (``FOR UPDATE SKIP LOCKED``: competing
planners never plan the same schedule at once and need no leader).

Functions take a connection inside a transaction; instants are UTC-aware datetimes, usually the
database clock read once per transaction (tests pass an explicit ``now``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, Select, Update, Uuid, func, select, update
from sqlalchemy.dialects.postgresql import Insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import Coalesced, JobRow
from gnomon.common.domain.policies import OccurrenceDecision
from gnomon.common.domain.states import ACTIVE
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.predicates import state_in
from gnomon.common.storage.schema import catchup_budget, jobs, schedule_occurrences, schedules
from gnomon.common.storage.statements import builder, named

#: Job states that make an occurrence "active" for the overlap policy.
ACTIVE_STATES = ACTIVE
_TS = DateTime(timezone=True)


@dataclass
class Writes:
    """The rows one planning transaction writes (flushed by :func:`flush`)."""

    jobs: list[JobRow] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    record_updates: list[dict[str, Any]] = field(default_factory=list)
    schedule_updates: list[dict[str, Any]] = field(default_factory=list)


def record_row(
    sched: dict[str, Any],
    *,
    nominal: datetime,
    local_time: str,
    decision: str,
    source: str,
    note: str,
    now: datetime,
    job_id: uuid.UUID | None = None,
    scheduled_at: datetime | None = None,
    overlap_policy: str | None = None,
    missed: Coalesced | None = None,
    request_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """A ``schedule_occurrences`` row (decision record) of ``sched``."""
    count, first, last = missed or (None, None, None)
    return dict(
        schedule_uid=sched["uid"],
        nominal_time=nominal,
        namespace=sched["namespace"],
        region=sched["region"],
        local_time=local_time,
        decision=decision,
        source=source,
        note=note[:2000],
        job_id=job_id,
        scheduled_at=scheduled_at,
        decided_at=now,
        overlap_policy=overlap_policy,
        missed_count=count,
        missed_first=first,
        missed_last=last,
        request_id=request_id,
    )


_UID = uuid.UUID(int=1)
_T0 = datetime(2026, 1, 1, tzinfo=UTC)
Row = dict[str, Any]


@builder(regions=["r"], now=_T0, limit=10)
def due_schedules_stmt(regions: list[str], now: datetime, limit: int) -> Select[Any]:
    """Up to ``limit`` ``schedules`` rows of the home ``regions`` whose ``plan_at`` is not after
    ``now``, oldest first, locked ``FOR UPDATE SKIP LOCKED``."""
    return (
        select(schedules)
        .where(schedules.c.region.in_(regions), schedules.c.plan_at <= now)
        .order_by(schedules.c.plan_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


async def claim_due(conn: AsyncConnection, *, regions: list[str], now: datetime, limit: int) -> list[Row]:
    """Up to ``limit`` schedules of the home ``regions`` whose ``plan_at`` has come, oldest first,
    locked ``FOR UPDATE SKIP LOCKED`` (a schedule another planner holds is skipped, not waited for)."""
    return [dict(r) for r in (await conn.execute(due_schedules_stmt(regions, now, limit))).mappings()]


@builder(regions=["r"], limit=10, after=_UID, skip=["ns"])
def buffered_schedules_stmt(
    regions: list[str], limit: int, after: uuid.UUID | None = None, skip: list[str] | None = None
) -> Select[Any]:
    """Up to ``limit`` ``schedules`` rows of the home ``regions`` with BUFFERED occurrences
    (``buffered > 0``) whose ``uid`` is after ``after`` (None: from the start) and whose namespace
    is not one of ``skip``, in ``uid`` order, locked ``FOR UPDATE SKIP LOCKED``."""
    q = select(schedules).where(schedules.c.region.in_(regions), schedules.c.buffered > 0)
    if after is not None:
        q = q.where(schedules.c.uid > after)
    if skip:
        q = q.where(schedules.c.namespace.not_in(skip))
    return q.order_by(schedules.c.uid).limit(limit).with_for_update(skip_locked=True)


async def claim_buffered(
    conn: AsyncConnection,
    *,
    regions: list[str],
    limit: int,
    after: uuid.UUID | None = None,
    skip: list[str] | None = None,
) -> list[Row]:
    """Up to ``limit`` schedules of the home ``regions`` with BUFFERED occurrences, in ``uid`` order
    after ``after`` (a release cursor; None: from the first), leaving out the namespaces ``skip``,
    locked ``FOR UPDATE SKIP LOCKED`` (see :func:`buffered_schedules_stmt`)."""
    stmt = buffered_schedules_stmt(regions, limit, after, skip)
    return [dict(r) for r in (await conn.execute(stmt)).mappings()]


@builder(regions=["r"])
def next_plan_at_stmt(regions: list[str]) -> Select[tuple[datetime | None]]:
    """The earliest ``plan_at`` of the schedules of the home ``regions`` (NULL when there are none)."""
    return select(func.min(schedules.c.plan_at)).where(schedules.c.region.in_(regions))


async def next_plan_at(conn: AsyncConnection, *, regions: list[str]) -> datetime | None:
    """The earliest ``plan_at`` of the home ``regions`` (None: nothing to plan)."""
    value: datetime | None = (await conn.execute(next_plan_at_stmt(regions))).scalar()
    return value


@builder(uids=[_UID])
def active_occurrences_stmt(uids: list[uuid.UUID]) -> Select[Any]:
    """``(schedule_uid, id, namespace, state, nominal_time)`` of the occurrence jobs of the schedules
    ``uids`` that are active (SCHEDULED, QUEUED or RUNNING)."""
    return select(jobs.c.schedule_uid, jobs.c.id, jobs.c.namespace, jobs.c.state, jobs.c.nominal_time).where(
        jobs.c.schedule_uid.in_(uids), state_in(jobs.c.state, ACTIVE_STATES)
    )


async def active_occurrences(conn: AsyncConnection, uids: list[uuid.UUID]) -> dict[uuid.UUID, list[Row]]:
    """Schedule uid -> its active occurrence jobs (``id``, ``namespace``, ``state``, ``nominal_time``),
    read from the database (the durable overlap state)."""
    if not uids:
        return {}
    rows = (await conn.execute(active_occurrences_stmt(uids))).mappings().all()
    out: dict[uuid.UUID, list[Row]] = {}
    for r in rows:
        out.setdefault(r["schedule_uid"], []).append(dict(r))
    return out


@builder(uid=_UID, limit=10)
def buffered_records_stmt(uid: uuid.UUID, limit: int) -> Select[Any]:
    """The oldest ``limit`` BUFFERED decision records of schedule ``uid``, in nominal order."""
    t = schedule_occurrences
    return (
        select(t)
        .where(t.c.schedule_uid == uid, t.c.decision == OccurrenceDecision.BUFFERED)
        .order_by(t.c.nominal_time)
        .limit(limit)
    )


async def buffered_records(conn: AsyncConnection, uid: uuid.UUID, *, limit: int) -> list[Row]:
    """The oldest ``limit`` BUFFERED decision records of schedule ``uid``, in nominal order."""
    return [dict(r) for r in (await conn.execute(buffered_records_stmt(uid, limit))).mappings()]


@builder(uid=_UID, request_id=_UID)
def record_by_request_stmt(uid: uuid.UUID, request_id: uuid.UUID) -> Select[Any]:
    """The decision record of schedule ``uid`` written by the TriggerSchedule with ``request_id``."""
    t = schedule_occurrences
    return select(t).where(t.c.schedule_uid == uid, t.c.request_id == request_id)


async def record_by_request(conn: AsyncConnection, uid: uuid.UUID, request_id: uuid.UUID) -> Row | None:
    """The decision record a TriggerSchedule with ``request_id`` wrote for schedule ``uid``, or None."""
    row = (await conn.execute(record_by_request_stmt(uid, request_id))).mappings().first()
    return dict(row) if row else None


@builder(uid=_UID, nominals=[_T0])
def existing_records_stmt(uid: uuid.UUID, nominals: list[datetime]) -> Select[tuple[datetime]]:
    """The nominal times among ``nominals`` that have a decision record of schedule ``uid``."""
    t = schedule_occurrences
    return select(t.c.nominal_time).where(t.c.schedule_uid == uid, t.c.nominal_time.in_(nominals))


async def existing_records(conn: AsyncConnection, uid: uuid.UUID, nominals: list[datetime]) -> set[datetime]:
    """Which of ``nominals`` already have a decision record for schedule ``uid``."""
    if not nominals:
        return set()
    rows = await conn.execute(existing_records_stmt(uid, nominals))
    return {r[0] for r in rows}


@builder(region="r", next_slot_at=_T0)
def init_catchup_stmt(region: str, next_slot_at: datetime) -> Insert:
    """Creates region ``region``'s catch-up bucket with its next slot at ``next_slot_at``; nothing
    if it exists."""
    return (
        pg_insert(catchup_budget)
        .values(region=region, next_slot_at=next_slot_at)
        .on_conflict_do_nothing(index_elements=["region"])
    )


@builder(region="r")
def lock_catchup_stmt(region: str) -> Select[tuple[datetime]]:
    """``next_slot_at`` of region ``region``'s catch-up bucket, its row locked ``FOR UPDATE``."""
    return select(catchup_budget.c.next_slot_at).where(catchup_budget.c.region == region).with_for_update()


@builder(region="r", next_slot_at=_T0)
def advance_catchup_stmt(region: str, next_slot_at: datetime) -> Update:
    """Moves region ``region``'s catch-up bucket's next slot to ``next_slot_at``."""
    return update(catchup_budget).where(catchup_budget.c.region == region).values(next_slot_at=next_slot_at)


async def reserve_catchup(
    conn: AsyncConnection, *, region: str, n: int, rate: float, burst: int, now: datetime
) -> list[datetime]:
    """Takes ``n`` slots of the region's global catch-up budget (a token bucket of ``rate`` runs per
    second and ``burst`` runs) and returns their release instants, ascending. The bucket row is
    locked for the rest of the transaction, so planners share one budget."""
    if n <= 0:
        return []
    await conn.execute(init_catchup_stmt(region, full_bucket(rate=rate, burst=burst, now=now)))
    cur = (await conn.execute(lock_catchup_stmt(region))).scalar_one()
    slots, nxt = catchup_slots(cur, n=n, rate=rate, burst=burst, now=now)
    await conn.execute(advance_catchup_stmt(region, nxt))
    return slots


def full_bucket(*, rate: float, burst: int, now: datetime) -> datetime:
    """The ``next_slot_at`` of a catch-up bucket that is full at ``now`` (``burst`` slots free)."""
    return now - timedelta(seconds=1 / rate) * burst


def catchup_slots(
    next_slot_at: datetime, *, n: int, rate: float, burst: int, now: datetime
) -> tuple[list[datetime], datetime]:
    """The token bucket's arithmetic (pure): ``n`` slots taken at ``now`` from a bucket of ``rate``
    runs per second and ``burst`` runs whose next free slot is ``next_slot_at``. Returns the slots'
    release instants (ascending, none before ``now``) and the bucket's new ``next_slot_at``. A full
    bucket lets ``burst`` runs go at ``now``, then one every ``1/rate`` seconds."""
    step = timedelta(seconds=1 / rate)
    start = max(next_slot_at, now - step * (burst - 1))
    return [max(now, start + step * i) for i in range(n)], start + step * n


INSERT_OCCURRENCES = named(
    __name__,
    "INSERT_OCCURRENCES",
    """Inserts occurrence ``jobs`` rows (:func:`gnomon.common.domain.jobs.occurrence_row`; one row
    through ``.values(...)`` or many as parameter rows), skipping ids that exist (``ON CONFLICT (id)
    DO NOTHING``: replaying a planning step writes nothing new); returns the ids inserted.""",
    pg_insert(jobs).on_conflict_do_nothing(index_elements=["id"]).returning(jobs.c.id),
)
INSERT_RECORDS = named(
    __name__,
    "INSERT_RECORDS",
    """Inserts decision records (``schedule_occurrences`` parameter rows, see :func:`record_row`);
    a record that exists keeps its first decision (``ON CONFLICT (schedule_uid, nominal_time) DO
    NOTHING``).""",
    pg_insert(schedule_occurrences).on_conflict_do_nothing(index_elements=["schedule_uid", "nominal_time"]),
)


@builder(uid=_UID, nominal=_T0, values={"decision": "FIRED"})
def release_record_stmt(uid: uuid.UUID, nominal: datetime, values: Row) -> Update:
    """Updates the BUFFERED decision record ``(uid, nominal)`` with ``values`` (its release:
    decision, job, times, note); nothing if it is no longer BUFFERED."""
    t = schedule_occurrences
    return (
        update(t)
        .where(
            t.c.schedule_uid == uid,
            t.c.nominal_time == nominal,
            t.c.decision == OccurrenceDecision.BUFFERED,
        )
        .values(**values)
    )


async def flush(conn: AsyncConnection, w: Writes) -> set[uuid.UUID]:
    """Writes ``w``: jobs and records ``ON CONFLICT DO NOTHING`` (a replay writes nothing new),
    record updates (releases), schedule updates (one statement). Returns the ids of jobs actually
    inserted."""
    inserted: set[uuid.UUID] = set()
    if w.jobs:
        res = (
            await conn.execute(INSERT_OCCURRENCES, list(w.jobs))
            if len(w.jobs) > 1
            else await conn.execute(INSERT_OCCURRENCES.values(**w.jobs[0]))
        )
        inserted = set(res.scalars().all())
    await insert_records(conn, w.records)
    for r in w.record_updates:
        values = {k: v for k, v in r.items() if k not in ("schedule_uid", "nominal_time")}
        await conn.execute(release_record_stmt(r["schedule_uid"], r["nominal_time"], values))
    if w.schedule_updates:
        await _update_schedules(conn, w.schedule_updates)
    return inserted


async def insert_records(conn: AsyncConnection, records: list[Row]) -> None:
    """Inserts decision records ``ON CONFLICT DO NOTHING`` (a record, once written, keeps its first decision)."""
    if records:
        await conn.execute(INSERT_RECORDS, records)


@builder(uid=_UID, delta=1)
def add_buffered_stmt(uid: uuid.UUID, delta: int) -> Update:
    """Adds ``delta`` (may be negative) to schedule ``uid``'s count of BUFFERED occurrences."""
    return update(schedules).where(schedules.c.uid == uid).values(buffered=schedules.c.buffered + delta)


async def add_buffered(conn: AsyncConnection, uid: uuid.UUID, delta: int) -> None:
    """Adds ``delta`` to schedule ``uid``'s count of BUFFERED occurrences (the planner's release loop
    looks at schedules whose count is positive)."""
    await conn.execute(add_buffered_stmt(uid, delta))


_U = unnest_rows(
    "u",
    uid=Uuid,
    planned_through=_TS,
    next_fire_at=_TS,
    plan_at=_TS,
    missed_count=Integer,
    missed_first=_TS,
    buffered=Integer,
    version=BigInteger,
)
UPDATE_PLANNED = named(
    __name__,
    "UPDATE_PLANNED",
    """Planning-state update of many schedules at once (one statement, cacheable).""",
    update(schedules)
    .where(schedules.c.uid == _U.c.uid, schedules.c.version == _U.c.version)
    .values(
        planned_through=_U.c.planned_through,
        next_fire_at=_U.c.next_fire_at,
        plan_at=_U.c.plan_at,
        missed_count=_U.c.missed_count,
        missed_first=_U.c.missed_first,
        buffered=_U.c.buffered,
    ),
)


async def _update_schedules(conn: AsyncConnection, ups: list[dict[str, Any]]) -> None:
    cols = (
        "uid",
        "planned_through",
        "next_fire_at",
        "plan_at",
        "missed_count",
        "missed_first",
        "buffered",
        "version",
    )
    await conn.execute(UPDATE_PLANNED, row_params("u", **{c: [u[c] for u in ups] for c in cols}))
