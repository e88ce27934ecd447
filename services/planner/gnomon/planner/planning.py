"""The planner's engine: bounded planning steps over due schedules, and releases of buffered
occurrences. Knows nothing of gRPC.

One planning step (:meth:`Planner.plan_once`) is one transaction:

1. read the database clock ``now`` (or take the test's explicit one);
2. claim up to ``batch`` schedules whose ``plan_at`` has come (``FOR UPDATE SKIP LOCKED``);
3. per schedule, decide with the pure step :func:`gnomon.common.scheduling.step.plan_schedule` (also
   the outage simulator's): expand the rule (:func:`gnomon.common.scheduling.expansion.window`, the
   same expansion the API's trigger, backfill and preview use) from its high-water mark ``planned_through`` up to the horizon
   (``now + lookahead`` for OVERLAP ALLOW, which may create jobs ahead of time; ``now`` for the other
   policies, whose decision needs the state at the due time), at most ``max_step_occurrences``
   nominal times;
4. classify them (misfire, pause, DST gap: :mod:`gnomon.common.scheduling.misfire`), apply the
   overlap policy against the schedule's active occurrences read from the database, admit each run
   against its namespace's ``max_pending_jobs`` (the room is counted under the namespace row's lock,
   :func:`gnomon.common.storage.namespaces.pending_room`; a run without room is recorded
   SKIPPED_QUOTA, a buffered release waits: :mod:`gnomon.common.scheduling.occurrences`), take
   catch-up budget slots, and write jobs + decision records idempotently;
5. move ``planned_through``, ``next_fire_at`` and ``plan_at`` forward (one statement).

A release step (:meth:`Planner.release_once`) claims up to ``batch`` schedules with BUFFERED
occurrences in ``uid`` order from a cursor (where the previous step stopped), leaving out the
namespaces an earlier step of the same round found without room; a short page ends the round (the
cursor and those namespaces are forgotten, so the next round looks at every schedule again). So the
schedules one namespace holds at its quota are looked at once a round, never ahead of every other
namespace's, and the loop runs the next release step at once only after one that released something
(otherwise it sleeps ``buffer_poll_s``): blocked schedules never keep the planner busy.

A crash anywhere before the commit loses nothing: the next step (by any planner) replays it and,
because occurrence ids are deterministic and inserts are ``ON CONFLICT DO NOTHING``, writes each
occurrence exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import metrics, tracing
from gnomon.common.config import PlannerSettings
from gnomon.common.errors import Unavailable
from gnomon.common.scheduling.misfire import Carry
from gnomon.common.scheduling.occurrences import StepBuilder
from gnomon.common.scheduling.overlap import OverlapState
from gnomon.common.scheduling.step import plan_schedule
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage import planning as store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.regions import served_regions
from gnomon.common.storage.schedules import db_now, rule_spec_of
from gnomon.common.time import Recurrence, compile_rule
from gnomon.planner import tracing as plan_tracing

log = logging.getLogger(__name__)

#: At most this many namespaces without room are left out of the release steps of one round (the
#: ``NOT IN`` list stays bounded; past it, more such namespaces are just looked at again).
MAX_SKIPPED_NAMESPACES = 500


@dataclass(frozen=True)
class StepStats:
    """What one step did: schedules looked at, jobs inserted, decision records written, and the
    earliest schedule time among the new jobs (for a dispatcher hint)."""

    schedules: int
    jobs: int
    records: int
    earliest: datetime | None


class RuleCache:
    """Compiled recurrences keyed by (schedule uid, version); at most ``size`` kept (LRU)."""

    def __init__(self, size: int = 200_000):
        self.size = size
        self._d: OrderedDict = OrderedDict()

    def get(self, sched: dict) -> Recurrence:
        """The compiled rule of ``sched`` (a ``schedules`` row)."""
        key = (sched["uid"], sched["version"])
        rec = self._d.get(key)
        if rec is None:
            rec = self._d[key] = compile_rule(rule_spec_of(sched))
            if len(self._d) > self.size:
                self._d.popitem(last=False)
        else:
            self._d.move_to_end(key)
        return rec


class Planner:
    """Plans the schedules of ``region``. ``hint(earliest)`` is called after a step that created jobs
    (a dispatcher wake-up; best effort)."""

    def __init__(
        self, engine: AsyncEngine, settings: PlannerSettings, *, region: str, shards: int, hint=None
    ):
        self.engine, self.settings, self.region, self.shards, self.hint = (
            engine,
            settings,
            region,
            shards,
            hint,
        )
        self.rules = RuleCache()
        self.wake = asyncio.Event()
        self.stepped = asyncio.Event()  # set after every loop round (tests wait on it)
        # the release round: the uid the next release step starts after, and the namespaces found
        # without room this round (both forgotten when a step ends the round)
        self._release_after: UUID | None = None
        self._release_skip: set[str] = set()

    # -- one planning step -------------------------------------------------------------------
    async def plan_once(self, now: datetime | None = None) -> StepStats:
        """One planning transaction (see the module docstring); ``now`` overrides the database clock."""
        return await run_transaction(self.engine, lambda c: self._plan(c, now))

    async def served(self, conn) -> list[str]:
        """Home regions this planner plans: its own, and those whose ``region_owners`` row names its
        region (a failover: docs/regions.md)."""
        return sorted({self.region, *await served_regions(conn, home=self.region)})

    async def _plan(self, conn, now: datetime | None) -> StepStats:
        t0 = time.time_ns() if tracing.ENABLED else 0
        now = now or await db_now(conn)
        s = self.settings
        rows = await store.claim_due(conn, regions=await self.served(conn), now=now, limit=s.batch)
        if not rows:
            return StepStats(0, 0, 0, None)
        active = await store.active_occurrences(conn, [r["uid"] for r in rows])
        room = await ns_store.pending_room(conn, [r["namespace"] for r in rows])
        b = StepBuilder(now=now, shards=self.shards, room=room)
        for sched in rows:
            self._plan_schedule(b, sched, now, active.setdefault(sched["uid"], []))
        res = await self._finish(conn, b, t0, len(rows), "plan")
        return StepStats(len(rows), len(res.inserted), len(res.records), res.earliest)

    async def _finish(self, conn, b: StepBuilder, t0: int, n: int, kind: str):
        """Writes what step builder ``b`` decided; with tracing on, inside a planning-step span
        (``kind``: plan or release, started at ``t0``) that each new occurrence's trace links to
        (docs/tracing.md). Returns :meth:`StepBuilder.finish`'s result."""
        s = self.settings
        step = plan_tracing.start_step(t0, n, kind) if tracing.ENABLED else None
        try:
            if step is not None:
                plan_tracing.stamp_occurrences(step, b.writes.jobs)
            return await b.finish(
                conn, region=self.region, catchup_rate=s.catchup_rate, catchup_burst=s.catchup_burst
            )
        finally:
            if step is not None:
                step.end()

    def _plan_schedule(self, b: StepBuilder, sched: dict, now: datetime, active: list[dict]) -> None:
        s = self.settings
        try:
            rec = self.rules.get(sched)
            plan = plan_schedule(
                sched, rec, now, lookahead=timedelta(seconds=s.lookahead_s), limit=s.max_step_occurrences
            )
        except Exception as e:  # RuleError: no longer compiles, or RULE_TOO_EXPENSIVE from a search
            log.error(
                "schedule %s/%s: rule no longer compiles or is too expensive to expand (%s); not planned",
                sched["namespace"],
                sched["schedule_id"],
                e,
            )
            b.writes.schedule_updates.append(
                self._state(sched, sched["planned_through"], None, None, Carry())
            )
            return
        state = OverlapState(active=len(active), buffered=sched["buffered"])
        for d in plan.decisions:
            b.add(sched, d, source="RULE", state=state, active=active)
        b.writes.schedule_updates.append(
            dict(
                self._state(sched, plan.planned_through, plan.next_fire, plan.plan_at, plan.carry),
                buffered=state.buffered,
            )
        )

    @staticmethod
    def _state(sched: dict, planned_through, next_fire, plan_at, carry: Carry) -> dict:
        return dict(
            uid=sched["uid"],
            version=sched["version"],
            planned_through=planned_through,
            next_fire_at=next_fire,
            plan_at=plan_at if not sched["paused"] else None,
            missed_count=carry.missed_count,
            missed_first=carry.missed_first,
            buffered=sched["buffered"],
        )

    # -- releases of buffered occurrences ------------------------------------------------------
    async def release_once(self, now: datetime | None = None) -> StepStats:
        """One transaction releasing BUFFERED occurrences whose schedule has no active occurrence
        left (or whose policy lets them go now) and whose namespace has room, over the next page of
        the release round (see the module docstring); ``now`` overrides the database clock. The
        round's cursor moves only once the transaction committed. ``records`` of the result: how
        many occurrences were released (or skipped by their overlap policy)."""
        st, last, full = await run_transaction(self.engine, lambda c: self._release(c, now))
        if st.schedules < self.settings.batch:  # the round is over: start the next one afresh
            self._release_after, self._release_skip = None, set()
        else:
            self._release_after = last
            for ns in sorted(full):
                if len(self._release_skip) >= MAX_SKIPPED_NAMESPACES:
                    break
                self._release_skip.add(ns)
        return st

    async def _release(self, conn, now: datetime | None) -> tuple[StepStats, UUID | None, set[str]]:
        """One release step; returns its stats, the last uid it claimed and the namespaces it left
        without room."""
        t0 = time.time_ns() if tracing.ENABLED else 0
        now = now or await db_now(conn)
        rows = await store.claim_buffered(
            conn,
            regions=await self.served(conn),
            limit=self.settings.batch,
            after=self._release_after,
            skip=sorted(self._release_skip),
        )
        if not rows:
            return StepStats(0, 0, 0, None), None, set()
        active = await store.active_occurrences(conn, [r["uid"] for r in rows])
        room = await ns_store.pending_room(conn, [r["namespace"] for r in rows])
        b = StepBuilder(now=now, shards=self.shards, room=room)
        changed = 0
        for sched in rows:
            acts = active.setdefault(sched["uid"], [])
            state = OverlapState(active=len(acts), buffered=sched["buffered"])
            waiting = await store.buffered_records(conn, sched["uid"], limit=100)
            for rec in waiting:
                if not b.add_release(sched, rec, state=state, active=acts):
                    break
                changed += 1
            if not waiting:
                state.buffered = 0  # repair a counter that drifted (records deleted by a re-plan)
            b.writes.schedule_updates.append(
                dict(
                    uid=sched["uid"],
                    version=sched["version"],
                    planned_through=sched["planned_through"],
                    next_fire_at=sched["next_fire_at"],
                    plan_at=sched["plan_at"],
                    missed_count=sched["missed_count"],
                    missed_first=sched["missed_first"],
                    buffered=max(state.buffered, 0),
                )
            )
        res = await self._finish(conn, b, t0, len(rows), "release")
        full = {ns for ns, left in b.room.items() if left <= 0}
        return StepStats(len(rows), len(res.inserted), changed, res.earliest), rows[-1]["uid"], full

    # -- the loop ----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Plans and releases until ``stop`` is set. Sleeps until the next ``plan_at`` (at most
        ``max_idle_poll_s``, at most ``buffer_poll_s`` while occurrences are buffered) or a hint;
        runs the next round at once only after a planning step that took a full batch or a release
        step that took a full batch and released something (never for schedules that stay blocked)."""
        s = self.settings
        while not stop.is_set():
            busy = False
            try:
                for step, releasing in ((self.plan_once, False), (self.release_once, True)):
                    st = await step()
                    if st.jobs and self.hint is not None and st.earliest is not None:
                        self.hint(st.earliest)
                    progress = not releasing or st.records > 0
                    busy = busy or (st.schedules >= s.batch and progress)
                sleep = await self._sleep_for()
            except Unavailable as e:
                log.warning("planner: %s", e)
                sleep = s.max_idle_poll_s
            except Exception:
                log.exception("planning step failed")
                sleep = s.max_idle_poll_s
            self.stepped.set()
            if busy:
                continue
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), sleep)
            except TimeoutError:
                pass

    async def _sleep_for(self) -> float:
        s = self.settings

        async def probe(conn):
            return await db_now(conn), await store.next_plan_at(conn, regions=await self.served(conn))

        now, nxt = await run_transaction(self.engine, probe)
        metrics.set_planner_due(None if nxt is None else nxt.timestamp(), now.timestamp() - time.time())
        sleep = s.max_idle_poll_s if nxt is None else (nxt - now).total_seconds()
        return max(0.0, min(sleep, s.max_idle_poll_s, s.buffer_poll_s))
