"""Named queries for the schedule resource: create, read, list, update, delete, pause, resume, and
the decision records (``schedule_occurrences``) they expose. Planning itself is in
:mod:`gnomon.common.storage.planning`.

Every function takes an open :class:`AsyncConnection` inside a transaction
(:func:`gnomon.common.storage.engine.run_transaction`). Instants are UTC-aware datetimes; spans are
stored as integer milliseconds. Changes are compare-and-set on ``version`` (AIP-154 etags).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Delete, Select, Update, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningInsert

from gnomon.common.domain.jobs import policy_columns
from gnomon.common.domain.policies import MisfirePolicy, OverlapPolicy
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import JobState
from gnomon.common.errors import AlreadyExists, FailedPrecondition, NotFound
from gnomon.common.names import schedule_name
from gnomon.common.retry import DEFAULT_POLICY, RetryPolicy
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.schema import jobs, schedule_occurrences, schedules
from gnomon.common.storage.statements import builder, named
from gnomon.common.time import DstFold, DstGap, RuleKind, RuleSpec

#: Defaults filled in when a request leaves a policy unset (documented in docs/schedules.md).
DEFAULT_MISFIRE = MisfirePolicy.RUN_LATEST
DEFAULT_OVERLAP = OverlapPolicy.SKIP
DEFAULT_GRACE = timedelta(seconds=60)
DEFAULT_CATCHUP_WINDOW = timedelta(hours=24)
DEFAULT_MAX_CATCHUP = 100


@dataclass(frozen=True)
class ScheduleValues:
    """The user-settable columns of a schedule (a validated request), keyed like ``schedules``.

    ``start_time``/``end_time`` are UTC instants or None; spans are :class:`timedelta`.
    """

    rule_kind: str
    expression: str
    interval: timedelta | None
    time_zone: str
    dst_gap: str
    dst_fold: str
    start_time: datetime | None
    end_time: datetime | None
    misfire_policy: str
    misfire_grace: timedelta
    catchup_window: timedelta
    max_catchup: int
    overlap_policy: str
    jitter: timedelta
    queue: str
    payload: bytes
    max_attempts: int
    lease: timedelta
    idempotent: bool
    start_to_close: timedelta | None
    start_deadline: timedelta | None
    retry: RetryPolicy = DEFAULT_POLICY
    paused: bool = False

    def columns(self) -> dict[str, Any]:
        """The ``schedules`` columns these values set."""
        ms = _ms
        return dict(
            rule_kind=self.rule_kind,
            expression=self.expression,
            interval_ms=ms(self.interval),
            time_zone=self.time_zone,
            dst_gap=self.dst_gap,
            dst_fold=self.dst_fold,
            start_time=self.start_time,
            end_time=self.end_time,
            misfire_policy=self.misfire_policy,
            misfire_grace_ms=ms(self.misfire_grace),
            catchup_window_ms=ms(self.catchup_window),
            max_catchup=self.max_catchup,
            overlap_policy=self.overlap_policy,
            jitter_ms=ms(self.jitter),
            queue=self.queue,
            payload=self.payload,
            max_attempts=self.max_attempts,
            lease_ms=ms(self.lease),
            idempotent=self.idempotent,
            start_to_close_ms=ms(self.start_to_close),
            start_deadline_ms=ms(self.start_deadline),
            **policy_columns(self.retry),
        )

    def spec(self) -> RuleSpec:
        """The recurrence rule these values describe."""
        return RuleSpec(
            kind=RuleKind(self.rule_kind),
            expression=self.expression,
            interval=self.interval,
            time_zone=self.time_zone,
            start=self.start_time,
            end=self.end_time,
            dst_gap=DstGap(self.dst_gap),
            dst_fold=DstFold(self.dst_fold),
        )


@dataclass(frozen=True)
class NewSchedule:
    """A validated CreateSchedule request."""

    namespace: str
    schedule_id: str
    region: str
    values: ScheduleValues
    request_id: uuid.UUID | None = None
    request_hash: str | None = None
    uid: uuid.UUID = field(default_factory=uuid.uuid4)


def _ms(d: timedelta | None) -> int | None:
    return None if d is None else round(d.total_seconds() * 1000)


def rule_spec_of(row: Mapping[Any, Any]) -> RuleSpec:
    """The :class:`RuleSpec` of a ``schedules`` row (a mapping)."""
    return RuleSpec(
        kind=RuleKind(row["rule_kind"]),
        expression=row["expression"],
        interval=None if row["interval_ms"] is None else timedelta(milliseconds=row["interval_ms"]),
        time_zone=row["time_zone"],
        start=row["start_time"],
        end=row["end_time"],
        dst_gap=DstGap(row["dst_gap"]),
        dst_fold=DstFold(row["dst_fold"]),
    )


DB_NOW = named(
    __name__,
    "DB_NOW",
    """Reads the database clock: ``now()``, the transaction's start instant (timestamptz).""",
    select(func.now()),
)
_UID = uuid.UUID(int=1)
_T0 = datetime(2026, 1, 1, tzinfo=UTC)
Row = dict[str, Any]


async def db_now(conn: AsyncConnection) -> datetime:
    """The database clock (``now()``, the transaction's start instant), UTC-aware."""
    now: datetime = (await conn.execute(DB_NOW)).scalar_one()
    return now.astimezone(UTC)


def planning_start(start_time: datetime | None, now: datetime) -> datetime:
    """The initial high-water mark of a schedule: nominal times strictly after it are planned.
    A schedule never fires for nominal times before its creation (``now``) or its ``start_time``."""
    if start_time is not None and start_time > now:
        return start_time - timedelta(microseconds=1)
    return now


def _first_plan_at(paused: bool, next_fire_at: datetime | None, now: datetime) -> datetime | None:
    """``plan_at`` of a new or re-planned schedule: at once (``now``), so a planner applies its own
    horizon from the first fire on (an OVERLAP ALLOW schedule gets its first job ahead of time, and a
    mass creation does not make every schedule due at the same boundary); None if paused or exhausted."""
    return None if paused or next_fire_at is None else now


@builder(namespace="ns", request_id=_UID)
def schedule_by_request_stmt(namespace: str, request_id: uuid.UUID) -> Select[Any]:
    """The ``schedules`` row created in ``namespace`` with ``request_id`` (every column)."""
    return select(schedules).where(schedules.c.namespace == namespace, schedules.c.request_id == request_id)


@builder(values={"namespace": "ns", "schedule_id": "s"})
def insert_schedule_stmt(values: Row) -> ReturningInsert[Any]:
    """Inserts the ``schedules`` row ``values`` (column -> value); nothing if the id is taken in the
    namespace (``ON CONFLICT (namespace, schedule_id) DO NOTHING``); returns the row inserted."""
    return (
        pg_insert(schedules)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["namespace", "schedule_id"])
        .returning(*schedules.c)
    )


async def insert_schedule(
    conn: AsyncConnection, new: NewSchedule, *, now: datetime, next_fire_at: datetime | None
) -> tuple[dict[str, Any], bool]:
    """Inserts a schedule; returns ``(row, created)``. ``next_fire_at`` is the first nominal time after
    :func:`planning_start` (None: the rule never fires again).

    Raises :class:`AlreadyExists` with reason SCHEDULE_EXISTS (id taken) or REQUEST_ID_REUSED (the
    ``request_id`` was used with another request); a repeat of the same request returns the original.
    """
    if new.request_id is not None:
        prior = (
            (await conn.execute(schedule_by_request_stmt(new.namespace, new.request_id))).mappings().first()
        )
        if prior is not None:
            if prior["request_hash"] != new.request_hash:
                raise AlreadyExists(
                    f"request_id {new.request_id} was already used with a different request",
                    metadata={"schedule": schedule_name(prior["namespace"], prior["schedule_id"])},
                )
            return dict(prior), False
    values = dict(
        namespace=new.namespace,
        schedule_id=new.schedule_id,
        uid=new.uid,
        region=new.region,
        **new.values.columns(),
        paused=new.values.paused,
        skip_through=None,
        version=1,
        created_at=now,
        updated_at=now,
        request_id=new.request_id,
        request_hash=new.request_hash,
        planned_through=planning_start(new.values.start_time, now),
        next_fire_at=next_fire_at,
        plan_at=_first_plan_at(new.values.paused, next_fire_at, now),
        buffered=0,
        missed_count=0,
        missed_first=None,
    )
    row = (await conn.execute(insert_schedule_stmt(values))).mappings().first()
    if row is None:
        raise AlreadyExists(
            f"schedule {schedule_name(new.namespace, new.schedule_id)} already exists",
            reason=ErrorReason.SCHEDULE_EXISTS,
        )
    return dict(row), True


@builder(namespace="ns", schedule_id="s", lock=True)
def schedule_stmt(namespace: str, schedule_id: str, lock: bool) -> Select[Any]:
    """The ``schedules`` row ``schedule_id`` of ``namespace``; ``lock``: locked ``FOR UPDATE``."""
    q = select(schedules).where(schedules.c.namespace == namespace, schedules.c.schedule_id == schedule_id)
    return q.with_for_update() if lock else q


async def get_schedule(
    conn: AsyncConnection, namespace: str, schedule_id: str, *, lock: bool = False
) -> dict[str, Any]:
    """The schedule row (``lock``: ``FOR UPDATE``); raises :class:`NotFound` (SCHEDULE_NOT_FOUND)."""
    row = (await conn.execute(schedule_stmt(namespace, schedule_id, lock))).mappings().first()
    if row is None:
        raise NotFound(
            f"schedule {schedule_name(namespace, schedule_id)} not found",
            reason=ErrorReason.SCHEDULE_NOT_FOUND,
        )
    return dict(row)


async def list_schedules(
    conn: AsyncConnection,
    namespace: str,
    *,
    paused: bool | None,
    queue: str | None,
    after: str | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` schedules of ``namespace`` ordered by id, strictly after id ``after``."""
    q = list_schedules_stmt(namespace, paused, queue, after, limit)
    return [dict(r) for r in (await conn.execute(q)).mappings()]


@builder(namespace="ns", paused=True, queue="q", after="a", limit=10)
def list_schedules_stmt(
    namespace: str, paused: bool | None, queue: str | None, after: str | None, limit: int
) -> Select[Any]:
    """Up to ``limit`` ``schedules`` rows of ``namespace`` ordered by id, strictly after id
    ``after``; optionally only (not) ``paused`` ones, or those of one ``queue``."""
    q = select(schedules).where(schedules.c.namespace == namespace)
    if paused is not None:
        q = q.where(schedules.c.paused == paused)
    if queue:
        q = q.where(schedules.c.queue == queue)
    if after is not None:
        q = q.where(schedules.c.schedule_id > after)
    return q.order_by(schedules.c.schedule_id).limit(limit)


def check_etag(row: dict[str, Any], etag: str | None) -> None:
    """Raises :class:`FailedPrecondition` (STALE_VERSION) when ``etag`` is given and is not the row's."""
    if etag and etag != str(row["version"]):
        raise FailedPrecondition(
            f"schedule is at etag {row['version']}, not {etag}; nothing was changed",
            reason=ErrorReason.STALE_VERSION,
            metadata={"etag": str(row["version"])},
        )


async def withdraw_future_jobs(conn: AsyncConnection, row: dict[str, Any], *, now: datetime | None) -> int:
    """Deletes the occurrence jobs of schedule ``row`` not dispatched yet (SCHEDULED, attempt 0) with
    their decision records, so they can be planned again: with ``now``, only those created ahead of
    time (nominal and schedule time after ``now``: pause, update); with None, all of them (delete).
    Returns how many jobs were withdrawn."""
    ids = list((await conn.execute(future_jobs_stmt(row["uid"], now))).scalars().all())
    if ids:
        for stmt in withdraw_jobs_stmts(row["uid"], ids):
            await conn.execute(stmt)
    return len(ids)


@builder(uid=_UID, now=_T0)
def future_jobs_stmt(uid: uuid.UUID, now: datetime | None) -> Select[tuple[uuid.UUID]]:
    """Ids of the occurrence jobs of schedule ``uid`` not dispatched yet (SCHEDULED, attempt 0),
    with ``now`` only those whose nominal and schedule time are after it; locked ``FOR UPDATE``."""
    q = select(jobs.c.id).where(
        jobs.c.schedule_uid == uid, state_is(jobs.c.state, JobState.SCHEDULED), jobs.c.attempt == 0
    )
    if now is not None:
        q = q.where(jobs.c.scheduled_at > now, jobs.c.nominal_time > now)
    return q.with_for_update()


@builder(uid=_UID, ids=[_UID])
def withdraw_jobs_stmts(uid: uuid.UUID, ids: list[uuid.UUID]) -> tuple[Delete, Delete]:
    """Deletes the decision records of schedule ``uid`` that point at jobs ``ids``, then those jobs:
    two statements, to run in order."""
    return (
        delete(schedule_occurrences).where(
            schedule_occurrences.c.schedule_uid == uid, schedule_occurrences.c.job_id.in_(ids)
        ),
        delete(jobs).where(jobs.c.id.in_(ids)),
    )


async def update_schedule(
    conn: AsyncConnection,
    row: dict[str, Any],
    changes: dict[str, Any],
    *,
    now: datetime,
    replan_from: datetime | None = None,
    next_fire_at: datetime | None = None,
) -> dict[str, Any]:
    """Applies ``changes`` (``schedules`` columns) to the locked ``row``, bumping ``version``.

    ``replan_from`` (the rule changed): the planned-ahead jobs are withdrawn, the high-water mark is
    set to it (nominal times after it are planned again under the new rule) and ``next_fire_at``
    (the new rule's first nominal time after it, computed by the caller) is stored. Returns the new row.
    """
    values = dict(changes, version=row["version"] + 1, updated_at=now)
    if replan_from is not None:
        await withdraw_future_jobs(conn, row, now=now)
        values.update(
            planned_through=replan_from,
            next_fire_at=next_fire_at,
            plan_at=_first_plan_at(row["paused"], next_fire_at, now),
        )
    stmt = update_schedule_stmt(row["namespace"], row["schedule_id"], row["version"], values)
    return dict((await conn.execute(stmt)).mappings().one())


@builder(namespace="ns", schedule_id="s", version=1, values={"paused": True})
def update_schedule_stmt(namespace: str, schedule_id: str, version: int, values: Row) -> Update:
    """Sets ``values`` (column -> value) on schedule ``schedule_id`` of ``namespace`` if it is still at
    ``version`` (compare-and-set); returns the new row."""
    return (
        update(schedules)
        .where(
            schedules.c.namespace == namespace,
            schedules.c.schedule_id == schedule_id,
            schedules.c.version == version,
        )
        .values(**values)
        .returning(*schedules.c)
    )


@builder(uid=_UID, values={"paused": True})
def set_schedule_stmt(uid: uuid.UUID, values: Row) -> Update:
    """Sets ``values`` (column -> value) on schedule ``uid`` (its row is locked by the caller);
    returns the new row."""
    return update(schedules).where(schedules.c.uid == uid).values(**values).returning(*schedules.c)


def replan_start(planned_through: datetime, start_time: datetime | None, now: datetime) -> datetime:
    """Where a re-planned schedule resumes: nominal times after ``min(planned_through, now)`` (jobs
    already dispatched stay), or after the new ``start_time`` when that is in the future."""
    if start_time is not None and start_time > now:
        return start_time - timedelta(microseconds=1)
    return min(planned_through, now)


async def delete_schedule(conn: AsyncConnection, row: dict[str, Any], *, now: datetime) -> int:
    """Deletes the locked ``row``, its decision records and every occurrence job not dispatched yet;
    returns how many jobs were withdrawn. Dispatched or running occurrences are left alone."""
    n = await withdraw_future_jobs(conn, row, now=None)
    for stmt in delete_schedule_stmts(row["uid"]):
        await conn.execute(stmt)
    return n


@builder(uid=_UID)
def delete_schedule_stmts(uid: uuid.UUID) -> tuple[Delete, Delete]:
    """Deletes every decision record of schedule ``uid``, then the schedule: two statements, in order."""
    return (
        delete(schedule_occurrences).where(schedule_occurrences.c.schedule_uid == uid),
        delete(schedules).where(schedules.c.uid == uid),
    )


async def pause_schedule(
    conn: AsyncConnection, row: dict[str, Any], *, now: datetime
) -> tuple[dict[str, Any], int]:
    """Pauses the locked ``row`` (idempotent): planned-ahead jobs are withdrawn, nothing more is planned.
    Returns ``(row, withdrawn jobs)``."""
    if row["paused"]:
        return row, 0
    n = await withdraw_future_jobs(conn, row, now=now)
    values = dict(
        paused=True,
        plan_at=None,
        planned_through=min(row["planned_through"], now),
        version=row["version"] + 1,
        updated_at=now,
    )
    return dict((await conn.execute(set_schedule_stmt(row["uid"], values))).mappings().one()), n


async def resume_schedule(conn: AsyncConnection, row: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    """Resumes the locked ``row`` (idempotent): nominal times up to ``now`` become SKIPPED_PAUSED when
    the planner reaches them (``skip_through``), and planning restarts at once."""
    if not row["paused"]:
        return row
    values = dict(
        paused=False,
        skip_through=now,
        plan_at=now if row["next_fire_at"] is not None else None,
        version=row["version"] + 1,
        updated_at=now,
    )
    return dict((await conn.execute(set_schedule_stmt(row["uid"], values))).mappings().one())


async def list_occurrences(
    conn: AsyncConnection, uid: uuid.UUID, *, decision: str | None, before: datetime | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` decision records of schedule ``uid``, newest nominal time first, strictly before
    the cursor ``before``; optionally one ``decision``."""
    q = list_occurrences_stmt(uid, decision, before, limit)
    return [dict(r) for r in (await conn.execute(q)).mappings()]


@builder(uid=_UID, decision="FIRED", before=_T0, limit=10)
def list_occurrences_stmt(
    uid: uuid.UUID, decision: str | None, before: datetime | None, limit: int
) -> Select[Any]:
    """Up to ``limit`` decision records of schedule ``uid``, newest nominal time first, strictly
    before ``before``; optionally only those with ``decision``."""
    t = schedule_occurrences
    q = select(t).where(t.c.schedule_uid == uid)
    if decision:
        q = q.where(t.c.decision == decision)
    if before is not None:
        q = q.where(t.c.nominal_time < before)
    return q.order_by(t.c.nominal_time.desc()).limit(limit)


@builder(uid=_UID, nominal=_T0)
def occurrence_stmt(uid: uuid.UUID, nominal: datetime) -> Select[Any]:
    """The decision record of schedule ``uid`` at nominal time ``nominal``."""
    t = schedule_occurrences
    return select(t).where(t.c.schedule_uid == uid, t.c.nominal_time == nominal)


async def get_occurrence(conn: AsyncConnection, uid: uuid.UUID, nominal: datetime) -> dict[str, Any] | None:
    """The decision record of ``(uid, nominal)``, or None."""
    row = (await conn.execute(occurrence_stmt(uid, nominal))).mappings().first()
    return dict(row) if row else None
