"""Turning decisions into writes: occurrence jobs, decision records, overlap cancellations and the
catch-up budget, for one transaction. Used by the planner (rule occurrences, buffer releases) and by
the API (TriggerSchedule), so both apply exactly the same rules.

Usage: create a :class:`StepBuilder` with the transaction's ``now``; call :meth:`StepBuilder.add` for
each decision (in nominal order per schedule) and :meth:`StepBuilder.add_release` for each BUFFERED
record; then ``await builder.finish(conn, ...)`` once.

**Quota** (``room``, the planner's): namespace -> how many more jobs it may have pending
(:func:`gnomon.common.storage.namespaces.pending_room`, counted under the namespace row's lock). A run
decided when its namespace has no room left is recorded ``SKIPPED_QUOTA`` and is not run, for good
(like a misfire SKIP: the schedule moves on, a later run of the rule is admitted when room exists);
a BUFFERED occurrence (overlap buffer, backfill) is not released while there is no room: it stays
BUFFERED and is released by a later step. A namespace absent from ``room`` has no limit.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import Coalesced, JobRow, jitter_of
from gnomon.common.domain.jobs import occurrence_row as job_row
from gnomon.common.domain.policies import OccurrenceSource
from gnomon.common.errors import GnomonError
from gnomon.common.scheduling import overlap
from gnomon.common.scheduling.misfire import (
    BUFFERED,
    FIRED,
    LATE,
    SKIPPED_MISFIRE,
    SKIPPED_OVERLAP,
    SKIPPED_QUOTA,
    Decision,
)
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage.planning import Writes, flush, record_row, reserve_catchup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult:
    """What a step wrote: ids of the jobs inserted (a replayed step inserts none), the earliest
    schedule time among them (None if none), and the decision records written, by nominal time."""

    inserted: set[uuid.UUID]
    earliest: datetime | None
    records: list[dict[str, Any]]


class StepBuilder:
    """Accumulates the writes of one planning transaction (see the module docstring).

    ``now``: the transaction's database clock (UTC); ``shards``: the region's shard count; ``room``:
    namespace -> jobs it may still create (see the module docstring; None: no quota applies, e.g.
    the API's trigger, admitted by the API).
    """

    def __init__(self, *, now: datetime, shards: int, room: dict[str, int] | None = None) -> None:
        self.now, self.shards = now, shards
        self.room = dict(room) if room else {}
        self.writes = Writes()
        # (job row, record row) waiting for a budget slot
        self._catchup: list[tuple[JobRow, dict[str, Any]]] = []
        self._cancels: list[tuple[str, uuid.UUID]] = []

    def _create(
        self, sched: dict[str, Any], nominal: datetime, *, catchup: bool, coalesced: Coalesced | None = None
    ) -> JobRow:
        at = self.now if catchup else nominal + jitter_of(sched["uid"], nominal, sched["jitter_ms"])
        job = job_row(sched, nominal, at, shards=self.shards, coalesced=coalesced)
        self.writes.jobs.append(job)
        return job

    def _take_room(self, namespace: str) -> bool:
        """Takes room for one job of ``namespace``; False when the namespace has none left."""
        left = self.room.get(namespace)
        if left is None:
            return True
        if left <= 0:
            return False
        self.room[namespace] = left - 1
        return True

    def _cancel_active(self, active: list[dict[str, Any]]) -> None:
        self._cancels += [(a["namespace"], a["id"]) for a in active]
        active.clear()

    def add(
        self,
        sched: dict[str, Any],
        d: Decision,
        *,
        source: str,
        state: overlap.OverlapState,
        active: list[dict[str, Any]],
        policy: str | None = None,
        request_id: uuid.UUID | None = None,
    ) -> dict[str, Any]:
        """Adds decision ``d`` for schedule ``sched``: a record, and for a run (``d.run``) the overlap
        policy's action (``policy`` overrides the schedule's). ``state``/``active`` are the schedule's
        overlap state and active jobs, updated in place. ``request_id`` (a trigger's) is stored on the
        record. Returns the record row."""
        pol = policy or sched["overlap_policy"]
        common: dict[str, Any] = dict(
            nominal=d.nominal, local_time=d.local_time, source=source, now=self.now, request_id=request_id
        )
        if not d.run:
            rec = record_row(sched, decision=d.decision, note=d.note, **common)
            self.writes.records.append(rec)
            return rec
        after = replace(state)  # the overlap state as if the action were carried out
        action, why = overlap.decide(pol, after)
        note = "; ".join(p for p in (why, d.note) if p)
        creates = action not in (overlap.SKIP, overlap.BUFFER)
        if creates and not self._take_room(sched["namespace"]):
            # nothing runs, nothing is cancelled: the overlap state stays as it was
            why_q = f"namespace {sched['namespace']} at its max_pending_jobs"
            rec = record_row(
                sched, decision=SKIPPED_QUOTA, note="; ".join(p for p in (why_q, d.note) if p), **common
            )
            self.writes.records.append(rec)
            return rec
        state.active, state.buffered = after.active, after.buffered
        if action == overlap.SKIP:
            rec = record_row(sched, decision=SKIPPED_OVERLAP, note=note, **common)
        elif action == overlap.BUFFER:
            rec = record_row(sched, decision=BUFFERED, note=note, overlap_policy=pol, **common)
        else:
            if action == overlap.CANCEL_AND_CREATE:
                self._cancel_active(active)
            coalesced = (d.missed_count, d.missed_first, d.missed_last) if d.missed_count else None
            job = self._create(sched, d.nominal, catchup=d.catchup, coalesced=coalesced)
            rec = record_row(
                sched,
                decision=d.decision,
                note=note,
                job_id=job["id"],
                scheduled_at=job["scheduled_at"],
                missed=coalesced,
                **common,
            )
            active.append(
                dict(id=job["id"], namespace=job["namespace"], state=job["state"], nominal_time=d.nominal)
            )
            if d.catchup:
                self._catchup.append((job, rec))
        self.writes.records.append(rec)
        return rec

    def add_release(
        self,
        sched: dict[str, Any],
        rec: dict[str, Any],
        *,
        state: overlap.OverlapState,
        active: list[dict[str, Any]],
    ) -> bool:
        """Decides one BUFFERED record ``rec`` (oldest first) under the policy it was buffered with.
        Returns False when it must keep waiting (the caller stops releasing this schedule)."""
        after = replace(state)
        action, why = overlap.release(rec["overlap_policy"] or sched["overlap_policy"], after)
        if action == overlap.BUFFER:
            return False
        if action != overlap.SKIP and not self._take_room(sched["namespace"]):
            return False  # at the quota: stays BUFFERED (state unchanged), released by a later step
        state.active, state.buffered = after.active, after.buffered
        state.buffered -= 1
        up = dict(schedule_uid=rec["schedule_uid"], nominal_time=rec["nominal_time"], decided_at=self.now)
        if action == overlap.SKIP:
            up.update(decision=SKIPPED_OVERLAP, note="; ".join(p for p in (why, rec["note"]) if p))
        else:
            if action == overlap.CANCEL_AND_CREATE:
                self._cancel_active(active)
            backfill = rec["source"] == OccurrenceSource.BACKFILL
            job = self._create(sched, rec["nominal_time"], catchup=True)
            decision = LATE if (self.now - rec["nominal_time"]).total_seconds() > 1 else FIRED
            note = "released" if backfill else (why or "released from the overlap buffer")
            up.update(
                decision=decision,
                note="; ".join(p for p in (note, rec["note"]) if p),
                job_id=job["id"],
                scheduled_at=job["scheduled_at"],
            )
            active.append(
                dict(
                    id=job["id"],
                    namespace=job["namespace"],
                    state=job["state"],
                    nominal_time=rec["nominal_time"],
                )
            )
            if backfill:
                self._catchup.append((job, up))
        self.writes.record_updates.append(up)
        return True

    @property
    def catchup_count(self) -> int:
        """How many catch-up runs (misfire catch-ups, backfill releases) wait for a budget slot."""
        return len(self._catchup)

    def settle(self, slots: list[datetime]) -> None:
        """Gives the catch-up runs their budget ``slots`` (ascending, one per run, see
        :attr:`catchup_count`) in nominal order (ties: by namespace and schedule id, so the order does
        not depend on the order schedules were claimed in) as their schedule times, then drops the runs that would
        start at or past their start deadline (their records become SKIPPED_MISFIRE). Pure: the
        planner's :meth:`finish` and the outage simulator both call it."""
        order = sorted(range(len(self._catchup)), key=lambda i: _slot_order(self._catchup[i][0]))
        for slot, i in zip(slots, order, strict=True):
            job, rec = self._catchup[i]
            job["scheduled_at"] = rec["scheduled_at"] = slot
        dropped = {
            j["id"]
            for j in self.writes.jobs
            if j["deadline"] is not None and j["deadline"] <= j["scheduled_at"]
        }
        if dropped:
            self.writes.jobs = [j for j in self.writes.jobs if j["id"] not in dropped]
            for rec in self.writes.records + self.writes.record_updates:
                if rec.get("job_id") in dropped:
                    rec.update(
                        decision=SKIPPED_MISFIRE,
                        job_id=None,
                        scheduled_at=None,
                        note="; ".join(p for p in ("past its start deadline", rec.get("note") or "") if p),
                    )

    async def finish(
        self, conn: AsyncConnection, *, region: str, catchup_rate: float, catchup_burst: int
    ) -> StepResult:
        """Reserves catch-up budget slots (in nominal order, ties by schedule), drops runs already past their start
        deadline (recorded SKIPPED_MISFIRE), applies CANCEL_OTHER cancellations and writes everything."""
        slots = await reserve_catchup(
            conn,
            region=region,
            n=len(self._catchup),
            rate=catchup_rate,
            burst=catchup_burst,
            now=self.now,
        )
        self.settle(slots)
        for ns, job_id in self._cancels:
            try:
                await cancel_store.cancel_job(conn, ns, job_id)
            except GnomonError as e:  # raced with its own end: nothing left to cancel
                log.info("overlap CANCEL_OTHER of job %s: %s", job_id, e)
        inserted = await flush(conn, self.writes)
        times = [j["scheduled_at"] for j in self.writes.jobs if j["id"] in inserted]
        return StepResult(
            inserted=inserted,
            earliest=min(times) if times else None,
            records=[dict(r) for r in self.writes.records],
        )


def _slot_order(job: JobRow) -> tuple[datetime, str, str]:
    """The order catch-up runs take budget slots in: nominal time, then namespace and schedule id."""
    return (job["nominal_time"], job["namespace"], job["schedule_id"] or "")
