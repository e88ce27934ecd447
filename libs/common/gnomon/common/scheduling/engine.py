"""The schedule engine: every change to a schedule and its occurrences that a caller asks for
(create, update, delete, pause, resume, trigger, backfill) and the preview of a rule, each one
transaction. Knows nothing of gRPC; the API's ``ScheduleService`` converts and calls it, and the
planner plans with the same pieces (:mod:`gnomon.common.scheduling.expansion` reads rules,
:class:`gnomon.common.scheduling.occurrences.StepBuilder` turns decisions into writes), so a trigger
and a planned occurrence follow exactly the same overlap and catch-up rules.

Rows are ``schedules`` / ``schedule_occurrences`` / ``jobs`` rows as dicts (the storage modules'
shape). Instants are UTC-aware datetimes; the transaction's ``now`` is the database clock. Errors:
:class:`gnomon.common.errors.NotFound` for an unknown schedule, ``FAILED_PRECONDITION`` (stale etag)
from :func:`gnomon.common.storage.schedules.check_etag`, :class:`InvalidArgument` as documented per
method. After a change the planner is woken (``wake_planner(schedule name)``) and, when a job was
created, the dispatchers (``wake_dispatchers(its schedule time)``); both are best-effort hints.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common import tracing
from gnomon.common.domain.policies import OccurrenceSource
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import FieldViolation, InvalidArgument
from gnomon.common.names import schedule_name
from gnomon.common.quotas import Admit
from gnomon.common.scheduling import expansion, outage
from gnomon.common.scheduling.misfire import BUFFERED, DEDUPLICATED, FIRED, Decision
from gnomon.common.scheduling.occurrences import StepBuilder
from gnomon.common.scheduling.overlap import OverlapState
from gnomon.common.storage import planning as plan_store
from gnomon.common.storage import schedules as store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.jobs import get_job
from gnomon.common.time import Occurrence, RuleSpec, compile_rule, get_zone

Row = dict[str, Any]
#: BackfillSchedule: at most this many fire times per request.
MAX_BACKFILL = 1000


@dataclass(frozen=True)
class Triggered:
    """A trigger's outcome: the schedule row, the decision record (``decision`` FIRED, BUFFERED,
    SKIPPED_OVERLAP, DEDUPLICATED...) and the job it created (None if none)."""

    schedule: Row
    record: Row
    job: Row | None


class ScheduleEngine:
    """Schedule operations over ``engine`` for a region with ``shards`` shards; catch-up releases are
    paced at ``catchup_rate`` jobs/s with bursts of ``catchup_burst`` (the planner's budget).
    ``lookahead_s`` (seconds) and ``max_step`` (nominal times per schedule per step) are the planner's
    settings the outage simulator models."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shards: int,
        catchup_rate: float,
        catchup_burst: int,
        wake_planner: Callable[[str], None] | None = None,
        wake_dispatchers: Callable[[datetime], None] | None = None,
        lookahead_s: float = 30.0,
        max_step: int = 1000,
    ):
        self.engine, self.shards = engine, shards
        self.lookahead_s, self.max_step = lookahead_s, max_step
        self.catchup_rate, self.catchup_burst = catchup_rate, catchup_burst
        self.wake_planner, self.wake_dispatchers = wake_planner, wake_dispatchers

    def _hint(self, row: Row) -> None:
        if self.wake_planner is not None:
            self.wake_planner(schedule_name(row["namespace"], row["schedule_id"]))

    # ---- reads ----------------------------------------------------------------------------------

    async def get(self, namespace: str, schedule_id: str) -> Row:
        """The schedule row; NOT_FOUND if there is none."""
        return await run_transaction(self.engine, lambda c: store.get_schedule(c, namespace, schedule_id))

    async def list_schedules(
        self, namespace: str, *, paused: bool | None, queue: str | None, after: str | None, limit: int
    ) -> list[Row]:
        """At most ``limit`` schedules of ``namespace`` with ids after ``after``, in id order."""
        return await run_transaction(
            self.engine,
            lambda c: store.list_schedules(
                c, namespace, paused=paused, queue=queue, after=after, limit=limit
            ),
        )

    async def list_occurrences(
        self, namespace: str, schedule_id: str, *, decision: str | None, before: datetime | None, limit: int
    ) -> list[Row]:
        """At most ``limit`` decision records of the schedule with nominal times before ``before``,
        newest first; NOT_FOUND for an unknown schedule."""

        async def txn(conn: AsyncConnection) -> list[Row]:
            row = await store.get_schedule(conn, namespace, schedule_id)
            return await store.list_occurrences(
                conn, row["uid"], decision=decision, before=before, limit=limit
            )

        return await run_transaction(self.engine, txn)

    # ---- changes --------------------------------------------------------------------------------

    async def create(self, new: store.NewSchedule) -> tuple[Row, bool]:
        """Inserts ``new`` (idempotent per request id): ``(row, created)``. INVALID_ARGUMENT
        (RULE_NEVER_FIRES, on ``schedule.{rule kind}``) when the rule has no fire time after now."""
        rec = compile_rule(new.values.spec())

        async def txn(conn: AsyncConnection) -> tuple[Row, bool]:
            now = await store.db_now(conn)
            nxt = expansion.first_after(rec, store.planning_start(new.values.start_time, now))
            if nxt is None:
                raise InvalidArgument(
                    [
                        FieldViolation(
                            f"schedule.{new.values.rule_kind.lower()}",
                            "the rule has no fire time after now (and before end_time)",
                        )
                    ],
                    reason=ErrorReason.RULE_NEVER_FIRES,
                )
            return await store.insert_schedule(conn, new, now=now, next_fire_at=nxt)

        row, created = await run_transaction(self.engine, txn)
        if created:
            self._hint(row)
        return row, created

    async def update(
        self, namespace: str, schedule_id: str, etag: str, merge: Callable[[Row], store.ScheduleValues]
    ) -> Row:
        """Locks the schedule, checks ``etag``, and applies ``merge(row)`` (the new values, already
        validated: it raises INVALID_ARGUMENT otherwise). Unchanged values write nothing; a change
        re-plans from the high-water mark (future jobs of the old rule withdrawn)."""

        async def txn(conn: AsyncConnection) -> Row:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            store.check_etag(row, etag)
            values = merge(row)
            changes = {k: v for k, v in values.columns().items() if row[k] != v}
            if not changes:
                return row
            now = await store.db_now(conn)
            start = store.replan_start(row["planned_through"], values.start_time, now)
            return await store.update_schedule(
                conn,
                row,
                changes,
                now=now,
                replan_from=start,
                next_fire_at=expansion.first_after(compile_rule(values.spec()), start),
            )

        row = await run_transaction(self.engine, txn)
        self._hint(row)
        return row

    async def delete(self, namespace: str, schedule_id: str, etag: str) -> int:
        """Deletes the schedule (etag checked) and withdraws its future jobs; returns how many."""

        async def txn(conn: AsyncConnection) -> int:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            store.check_etag(row, etag)
            return await store.delete_schedule(conn, row, now=await store.db_now(conn))

        return await run_transaction(self.engine, txn)

    async def pause(self, namespace: str, schedule_id: str) -> tuple[Row, int]:
        """Pauses the schedule: ``(row, future jobs withdrawn)``."""

        async def txn(conn: AsyncConnection) -> tuple[Row, int]:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            return await store.pause_schedule(conn, row, now=await store.db_now(conn))

        return await run_transaction(self.engine, txn)

    async def resume(self, namespace: str, schedule_id: str) -> Row:
        """Resumes the schedule (times missed while paused follow its misfire policy)."""

        async def txn(conn: AsyncConnection) -> Row:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            return await store.resume_schedule(conn, row, now=await store.db_now(conn))

        row = await run_transaction(self.engine, txn)
        self._hint(row)
        return row

    async def trigger(
        self,
        namespace: str,
        schedule_id: str,
        *,
        policy: str | None,
        request_id: uuid.UUID | None,
        admit: Admit | None = None,
    ) -> Triggered:
        """One run now (nominal time: the database clock, whole milliseconds), decided by the overlap
        ``policy`` (None: the schedule's) like a planned occurrence (source TRIGGER). A retried
        ``request_id`` returns the first trigger's outcome; a second trigger in the same millisecond is
        DEDUPLICATED. ``admit(n)`` (None: no quota) is given the number of jobs the decision creates
        (0 or 1) before anything is written; what it raises (QuotaExceeded) rolls everything back."""

        async def txn(conn: AsyncConnection) -> Triggered:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            if request_id is not None:
                prior = await plan_store.record_by_request(conn, row["uid"], request_id)
                if prior is not None:  # a retried trigger: the first one's outcome, nothing new
                    job = await get_job(conn, namespace, prior["job_id"]) if prior.get("job_id") else None
                    return Triggered(row, prior, job)
            now = await store.db_now(conn)
            nominal = now.replace(microsecond=now.microsecond // 1000 * 1000)
            local = nominal.astimezone(get_zone(row["time_zone"])).isoformat()
            existing = await store.get_occurrence(conn, row["uid"], nominal)
            if existing is not None:
                return Triggered(row, dict(existing, decision=DEDUPLICATED), None)
            active = (await plan_store.active_occurrences(conn, [row["uid"]])).get(row["uid"], [])
            state = OverlapState(active=len(active), buffered=row["buffered"])
            b = StepBuilder(now=now, shards=self.shards)
            rec = b.add(
                row,
                Decision(nominal, local, FIRED, "triggered (TriggerSchedule)", run=True),
                source=OccurrenceSource.TRIGGER,
                state=state,
                active=active,
                policy=policy,
                request_id=request_id,
            )
            if admit is not None:
                await admit(conn, len(b.writes.jobs))
            if tracing.ENABLED:  # a child of the caller's span, if it sent one (docs/tracing.md)
                tracing.stamp_occurrences(b.writes.jobs)
            await b.finish(
                conn, region=row["region"], catchup_rate=self.catchup_rate, catchup_burst=self.catchup_burst
            )
            if state.buffered != row["buffered"]:
                await plan_store.add_buffered(conn, row["uid"], state.buffered - row["buffered"])
            job = await get_job(conn, namespace, rec["job_id"]) if rec.get("job_id") else None
            return Triggered(row, rec, job)

        out = await run_transaction(self.engine, txn)
        if out.job is not None and self.wake_dispatchers is not None:
            self.wake_dispatchers(out.job["scheduled_at"])
        if out.record["decision"] == BUFFERED:
            self._hint(out.schedule)
        return out

    async def backfill(
        self,
        namespace: str,
        schedule_id: str,
        *,
        start: datetime,
        end: datetime,
        policy: str | None,
        admit: Admit | None = None,
    ) -> list[Row]:
        """Records every nominal time of the rule in ``[start, end)`` (at most :data:`MAX_BACKFILL`)
        as BUFFERED (source BACKFILL, released by the planner under ``policy``, None: the schedule's),
        SKIPPED_DST_GAP for skip markers, DEDUPLICATED where an occurrence already exists (not
        written). Returns the records in nominal order. INVALID_ARGUMENT on ``end_time`` when ``end``
        is after now (database clock) or the range holds too many times. ``admit(n)`` (None: no quota)
        is given the number of new BUFFERED occurrences (the jobs the planner will release) before
        anything is written; what it raises (QuotaExceeded) rolls everything back."""

        async def txn(conn: AsyncConnection) -> tuple[Row, list[Row]]:
            row = await store.get_schedule(conn, namespace, schedule_id, lock=True)
            now = await store.db_now(conn)
            if end > now:
                raise InvalidArgument(
                    [
                        FieldViolation(
                            "end_time",
                            "must not be after now (database clock); future times are planned by the rule",
                        )
                    ]
                )
            occs = expansion.in_range(compile_rule(store.rule_spec_of(row)), start, end, limit=MAX_BACKFILL)
            have = await plan_store.existing_records(conn, row["uid"], [o.fire_time for o in occs])
            out: list[Row] = []
            new: list[Row] = []
            for o in occs:
                base: dict[str, Any] = dict(
                    nominal=o.fire_time,
                    local_time=o.local_time.isoformat(),
                    source=OccurrenceSource.BACKFILL,
                    now=now,
                )
                if o.fire_time in have:
                    out.append(
                        plan_store.record_row(
                            row, decision=DEDUPLICATED, note="already has an occurrence", **base
                        )
                    )
                    continue
                if o.skipped_dst_gap:
                    r = plan_store.record_row(row, decision="SKIPPED_DST_GAP", note=o.note, **base)
                else:
                    r = plan_store.record_row(
                        row,
                        decision=BUFFERED,
                        note="backfill",
                        overlap_policy=policy or row["overlap_policy"],
                        **base,
                    )
                new.append(r)
                out.append(r)
            n = sum(r["decision"] == BUFFERED for r in new)
            if admit is not None:
                await admit(conn, n)
            await plan_store.insert_records(conn, new)
            if n:
                await plan_store.add_buffered(conn, row["uid"], n)
            return row, out

        row, out = await run_transaction(self.engine, txn)
        self._hint(row)
        return out

    async def preview(
        self,
        *,
        count: int,
        spec: RuleSpec | None = None,
        schedule: tuple[str, str] | None = None,
        after: datetime | None = None,
    ) -> list[Occurrence]:
        """The next ``count`` fire times (skip markers listed, not counted) of rule ``spec`` or of the
        saved ``schedule`` (namespace, id; NOT_FOUND if unknown), strictly after ``after`` (None:
        now, database clock). Writes nothing."""
        if schedule is not None:
            spec = store.rule_spec_of(await self.get(*schedule))
        if spec is None:
            raise ValueError("preview needs a rule spec or a schedule")
        if after is None:
            after = await run_transaction(self.engine, store.db_now)
        return expansion.preview(compile_rule(spec), after, count)

    async def simulate_outage(
        self,
        namespace: str,
        schedule_id: str | None,
        *,
        start: datetime,
        end: datetime,
        assume_active: int,
        after: str | None,
        limit: int,
        max_listed: int,
    ) -> tuple[list[outage.OutagePrediction], bool]:
        """What the planner would do after an outage from ``start`` to ``end``
        (:func:`gnomon.common.scheduling.outage.simulate`) for the schedule ``schedule_id`` (NOT_FOUND
        if unknown) or, when None, for at most ``limit`` schedules of ``namespace`` with ids after
        ``after`` (id order). Returns the predictions and whether more schedules follow. Reads in one
        transaction, writes nothing; the simulation runs in a worker thread. INVALID_ARGUMENT (field
        ``outage_end_time``) as :func:`outage.simulate`."""
        outage.check_window(start, end)

        async def txn(conn: AsyncConnection) -> list[Row]:
            if schedule_id is not None:
                return [await store.get_schedule(conn, namespace, schedule_id)]
            return await store.list_schedules(
                conn, namespace, paused=None, queue=None, after=after, limit=limit + 1
            )

        rows = await run_transaction(self.engine, txn)
        more = len(rows) > limit
        rows = rows[:limit]
        model = outage.PlannerModel(
            lookahead=timedelta(seconds=self.lookahead_s),
            max_step=self.max_step,
            catchup_rate=self.catchup_rate,
            catchup_burst=self.catchup_burst,
            shards=self.shards,
        )
        compiled = [(r, compile_rule(store.rule_spec_of(r))) for r in rows]
        preds = await asyncio.to_thread(
            outage.simulate,
            compiled,
            start=start,
            end=end,
            model=model,
            assume_active=assume_active,
            max_listed=max_listed,
        )
        return preds, more
