"""Named queries of the planner: claiming due schedules, reading the durable overlap state, writing
occurrence jobs and decision records idempotently, and the global catch-up budget.

Idempotence (DESIGN.md invariant 5): an occurrence's job id is :func:`gnomon.common.domain.jobs.occurrence_job_id` (a UUIDv5 of
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
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, DateTime, Integer, Uuid, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import JobRow
from gnomon.common.domain.states import ACTIVE
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.schema import catchup_budget, jobs, schedule_occurrences, schedules

#: Job states that make an occurrence "active" for the overlap policy.
ACTIVE_STATES = ACTIVE
_TS = DateTime(timezone=True)


@dataclass
class Writes:
    """The rows one planning transaction writes (flushed by :func:`flush`)."""

    jobs: list[JobRow] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    record_updates: list[dict] = field(default_factory=list)
    schedule_updates: list[dict] = field(default_factory=list)


def record_row(
    sched: dict,
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
    missed=None,
    request_id: uuid.UUID | None = None,
) -> dict:
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


async def claim_due(conn: AsyncConnection, *, regions: list[str], now: datetime, limit: int) -> list[dict]:
    """Up to ``limit`` schedules of the home ``regions`` whose ``plan_at`` has come, oldest first,
    locked ``FOR UPDATE SKIP LOCKED`` (a schedule another planner holds is skipped, not waited for)."""
    q = (
        select(schedules)
        .where(schedules.c.region.in_(regions), schedules.c.plan_at <= now)
        .order_by(schedules.c.plan_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [dict(r) for r in (await conn.execute(q)).mappings()]


async def claim_buffered(conn: AsyncConnection, *, regions: list[str], limit: int) -> list[dict]:
    """Up to ``limit`` schedules of the home ``regions`` with BUFFERED occurrences, locked
    ``FOR UPDATE SKIP LOCKED``."""
    q = (
        select(schedules)
        .where(schedules.c.region.in_(regions), schedules.c.buffered > 0)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [dict(r) for r in (await conn.execute(q)).mappings()]


async def next_plan_at(conn: AsyncConnection, *, regions: list[str]) -> datetime | None:
    """The earliest ``plan_at`` of the home ``regions`` (None: nothing to plan)."""
    return (
        await conn.execute(select(func.min(schedules.c.plan_at)).where(schedules.c.region.in_(regions)))
    ).scalar()


async def active_occurrences(conn: AsyncConnection, uids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict]]:
    """Schedule uid -> its active occurrence jobs (``id``, ``namespace``, ``state``, ``nominal_time``),
    read from the database (the durable overlap state)."""
    if not uids:
        return {}
    rows = (
        (
            await conn.execute(
                select(
                    jobs.c.schedule_uid, jobs.c.id, jobs.c.namespace, jobs.c.state, jobs.c.nominal_time
                ).where(jobs.c.schedule_uid.in_(uids), jobs.c.state.in_(ACTIVE_STATES))
            )
        )
        .mappings()
        .all()
    )
    out: dict[uuid.UUID, list[dict]] = {}
    for r in rows:
        out.setdefault(r["schedule_uid"], []).append(dict(r))
    return out


async def buffered_records(conn: AsyncConnection, uid: uuid.UUID, *, limit: int) -> list[dict]:
    """The oldest ``limit`` BUFFERED decision records of schedule ``uid``, in nominal order."""
    t = schedule_occurrences
    q = (
        select(t)
        .where(t.c.schedule_uid == uid, t.c.decision == "BUFFERED")
        .order_by(t.c.nominal_time)
        .limit(limit)
    )
    return [dict(r) for r in (await conn.execute(q)).mappings()]


async def record_by_request(conn: AsyncConnection, uid: uuid.UUID, request_id: uuid.UUID) -> dict | None:
    """The decision record a TriggerSchedule with ``request_id`` wrote for schedule ``uid``, or None."""
    t = schedule_occurrences
    row = (
        (await conn.execute(select(t).where(t.c.schedule_uid == uid, t.c.request_id == request_id)))
        .mappings()
        .first()
    )
    return dict(row) if row else None


async def existing_records(conn: AsyncConnection, uid: uuid.UUID, nominals: list[datetime]) -> set[datetime]:
    """Which of ``nominals`` already have a decision record for schedule ``uid``."""
    if not nominals:
        return set()
    t = schedule_occurrences
    rows = await conn.execute(
        select(t.c.nominal_time).where(t.c.schedule_uid == uid, t.c.nominal_time.in_(nominals))
    )
    return {r[0] for r in rows}


async def reserve_catchup(
    conn: AsyncConnection, *, region: str, n: int, rate: float, burst: int, now: datetime
) -> list[datetime]:
    """Takes ``n`` slots of the region's global catch-up budget (a token bucket of ``rate`` runs per
    second and ``burst`` runs) and returns their release instants, ascending. The bucket row is
    locked for the rest of the transaction, so planners share one budget."""
    if n <= 0:
        return []
    step = timedelta(seconds=1 / rate)
    await conn.execute(
        pg_insert(catchup_budget)
        .values(region=region, next_slot_at=now - step * burst)
        .on_conflict_do_nothing(index_elements=["region"])
    )
    cur = (
        await conn.execute(
            select(catchup_budget.c.next_slot_at).where(catchup_budget.c.region == region).with_for_update()
        )
    ).scalar_one()
    start = max(cur, now - step * (burst - 1))  # a full bucket lets `burst` runs go at once
    slots = [max(now, start + step * i) for i in range(n)]
    await conn.execute(
        update(catchup_budget).where(catchup_budget.c.region == region).values(next_slot_at=start + step * n)
    )
    return slots


async def flush(conn: AsyncConnection, w: Writes) -> set[uuid.UUID]:
    """Writes ``w``: jobs and records ``ON CONFLICT DO NOTHING`` (a replay writes nothing new),
    record updates (releases), schedule updates (one statement). Returns the ids of jobs actually
    inserted."""
    inserted: set[uuid.UUID] = set()
    if w.jobs:
        stmt = pg_insert(jobs).on_conflict_do_nothing(index_elements=["id"]).returning(jobs.c.id)
        res = (
            await conn.execute(stmt, w.jobs)
            if len(w.jobs) > 1
            else await conn.execute(stmt.values(**w.jobs[0]))
        )
        inserted = set(res.scalars().all())
    await insert_records(conn, w.records)
    for r in w.record_updates:
        t = schedule_occurrences
        await conn.execute(
            update(t)
            .where(
                t.c.schedule_uid == r["schedule_uid"],
                t.c.nominal_time == r["nominal_time"],
                t.c.decision == "BUFFERED",
            )
            .values(**{k: v for k, v in r.items() if k not in ("schedule_uid", "nominal_time")})
        )
    if w.schedule_updates:
        await _update_schedules(conn, w.schedule_updates)
    return inserted


async def insert_records(conn: AsyncConnection, records: list[dict]) -> None:
    """Inserts decision records ``ON CONFLICT DO NOTHING`` (a record, once written, keeps its first decision)."""
    if records:
        await conn.execute(
            pg_insert(schedule_occurrences).on_conflict_do_nothing(
                index_elements=["schedule_uid", "nominal_time"]
            ),
            records,
        )


async def add_buffered(conn: AsyncConnection, uid: uuid.UUID, delta: int) -> None:
    """Adds ``delta`` to schedule ``uid``'s count of BUFFERED occurrences (the planner's release loop
    looks at schedules whose count is positive)."""
    await conn.execute(
        update(schedules).where(schedules.c.uid == uid).values(buffered=schedules.c.buffered + delta)
    )


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
#: Planning-state update of many schedules at once (one statement, cacheable).
UPDATE_PLANNED = (
    update(schedules)
    .where(schedules.c.uid == _U.c.uid, schedules.c.version == _U.c.version)
    .values(
        planned_through=_U.c.planned_through,
        next_fire_at=_U.c.next_fire_at,
        plan_at=_U.c.plan_at,
        missed_count=_U.c.missed_count,
        missed_first=_U.c.missed_first,
        buffered=_U.c.buffered,
    )
)


async def _update_schedules(conn: AsyncConnection, ups: list[dict]) -> None:
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
