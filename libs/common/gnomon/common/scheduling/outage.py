"""The outage simulator (pure logic, no I/O): "what happens if the planner is down from T1 to T2?"

The model: the planner's last step before the outage ran at ``start`` (T1), so every nominal time up
to ``start`` (plus the planner's look-ahead for OVERLAP ALLOW schedules, whose jobs are created
ahead of time) was decided; nothing is planned in between; the first step after the outage runs at
``end`` (T2) and plans the backlog exactly as the planner does, with the same functions:
:func:`gnomon.common.scheduling.step.plan_schedule` (expansion, misfire classification, multi-step
backlogs), :meth:`gnomon.common.scheduling.occurrences.StepBuilder.add` (overlap policy) and
:meth:`~gnomon.common.scheduling.occurrences.StepBuilder.settle` with
:func:`gnomon.common.storage.planning.catchup_slots` (global catch-up budget, start deadlines).

Assumptions (each prediction repeats the ones that apply): the catch-up budget's bucket is full at
T2 and shared only by the schedules simulated together (in the planner it is shared by every
schedule of the region); ``assume_active`` occurrences of each schedule are still active (queued or
running) at T2; the schedules do not change during the outage. Buffered runs are released when the
active ones finish, which the simulator cannot know: they are reported BUFFERED.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gnomon.common.domain.policies import OccurrenceSource, OverlapPolicy
from gnomon.common.domain.states import JobState
from gnomon.common.errors import FieldViolation, InvalidArgument
from gnomon.common.scheduling import expansion
from gnomon.common.scheduling.misfire import BUFFERED, COALESCED, FIRED, LATE, Carry
from gnomon.common.scheduling.occurrences import StepBuilder
from gnomon.common.scheduling.overlap import OverlapState
from gnomon.common.scheduling.step import horizon, plan_schedule
from gnomon.common.storage.planning import catchup_slots, full_bucket
from gnomon.common.time import Recurrence

Row = dict[str, Any]
#: An outage may span at most this long.
MAX_OUTAGE = timedelta(days=366)
#: At most this many nominal times (all schedules of one request together) are simulated.
MAX_SIMULATED_TIMES = 100_000
#: Decisions that make or keep a run (listed one by one); the others are summarised in ranges.
RUN_DECISIONS = frozenset({FIRED, LATE, COALESCED, BUFFERED})


@dataclass(frozen=True)
class PlannerModel:
    """The planner settings a prediction depends on: ``lookahead`` (OVERLAP ALLOW horizon),
    ``max_step`` (nominal times per schedule per step), ``catchup_rate`` (runs/s) and
    ``catchup_burst`` (runs) of the global catch-up budget, and the region's ``shards``."""

    lookahead: timedelta
    max_step: int
    catchup_rate: float
    catchup_burst: int
    shards: int


@dataclass
class SkippedRange:
    """``count`` consecutive nominal times ``first`` .. ``last`` with the same ``decision`` (a
    SKIPPED_* one) and ``note`` (why)."""

    decision: str
    note: str
    count: int
    first: datetime
    last: datetime


@dataclass
class OutagePrediction:
    """What the planner would do with one schedule (``schedule``: its row) after the outage.

    ``missed_count``: nominal times in the outage (after the last pre-outage horizon, at or before its
    end), ``missed_first``/``missed_last`` the first and last (None if none). ``runs``: the decision
    records (:func:`gnomon.common.storage.planning.record_row` shape, ``job_id`` left as the id the
    job would get) that run or wait (FIRED, LATE, COALESCED, BUFFERED), nominal order, at most
    ``max_listed``; ``run_count`` counts them all. ``skipped``: every other decision, as ranges of
    the same decision and note (at most ``max_listed`` ranges: notes that name a lag make a range per
    time); ``skipped_count`` counts them all.
    ``catchup_finish``: the latest schedule time among the runs (None if none). ``assumptions``:
    the model's assumptions that apply, as sentences."""

    schedule: Row
    missed_count: int = 0
    missed_first: datetime | None = None
    missed_last: datetime | None = None
    runs: list[Row] = field(default_factory=list)
    run_count: int = 0
    skipped: list[SkippedRange] = field(default_factory=list)
    skipped_count: int = 0
    catchup_finish: datetime | None = None
    assumptions: list[str] = field(default_factory=list)

    def _add(self, rec: Row, max_listed: int) -> None:
        t = rec["nominal_time"]
        self.missed_count += 1
        self.missed_first = self.missed_first or t
        self.missed_last = t
        if rec["decision"] in RUN_DECISIONS:
            self.run_count += 1
            if len(self.runs) < max_listed:
                self.runs.append(rec)
            at = rec.get("scheduled_at")
            if at is not None and (self.catchup_finish is None or at > self.catchup_finish):
                self.catchup_finish = at
            return
        self.skipped_count += 1
        last = self.skipped[-1] if self.skipped else None
        if last is not None and last.decision == rec["decision"] and last.note == rec["note"]:
            last.count, last.last = last.count + 1, t
        elif len(self.skipped) < max_listed:
            self.skipped.append(SkippedRange(rec["decision"], rec["note"], 1, t, t))


@dataclass
class _State:
    pred: OutagePrediction
    rec: Recurrence
    planned_through: datetime
    overlap: OverlapState
    active: list[Row]
    carry: Carry = Carry()
    done: bool = False


def check_window(start: datetime, end: datetime) -> None:
    """Raises :class:`InvalidArgument` (field ``outage_end_time``) unless ``start < end`` and the
    span is at most :data:`MAX_OUTAGE`."""
    if end <= start:
        raise InvalidArgument([FieldViolation("outage_end_time", "must be after outage_start_time")])
    if end - start > MAX_OUTAGE:
        raise InvalidArgument(
            [FieldViolation("outage_end_time", f"the outage may span at most {MAX_OUTAGE.days} days")]
        )


def _first_planned(sched: Row, start: datetime, lookahead: timedelta) -> datetime:
    """The high-water mark at the outage's start: ``start`` plus the horizon, and never before the
    schedule's creation (it never fires for earlier times)."""
    created: datetime = sched["created_at"]
    return max(start + horizon(sched, lookahead), created)


def simulate(
    schedules: list[tuple[Row, Recurrence]],
    *,
    start: datetime,
    end: datetime,
    model: PlannerModel,
    assume_active: int = 0,
    max_listed: int = 1000,
) -> list[OutagePrediction]:
    """Predicts, per schedule (``(row, compiled rule)``, in the given order), what the planner does
    after an outage from ``start`` to ``end`` (see the module docstring). Raises
    :class:`InvalidArgument` on ``outage_end_time`` for a bad window (:func:`check_window`) or when
    the schedules hold more than :data:`MAX_SIMULATED_TIMES` nominal times in it together."""
    check_window(start, end)
    states: list[_State] = []
    total = 0
    for sched, rec in schedules:
        pred = OutagePrediction(sched, assumptions=_assumptions(sched, assume_active, model))
        after = _first_planned(sched, start, model.lookahead)
        if sched["paused"] or after >= end:
            states.append(_State(pred, rec, after, OverlapState(0, 0), [], done=True))
            continue
        n = len(expansion.window(rec, after, through=end, limit=MAX_SIMULATED_TIMES - total + 1).occurrences)
        total += n
        if total > MAX_SIMULATED_TIMES:
            raise InvalidArgument(
                [
                    FieldViolation(
                        "outage_end_time",
                        f"the outage holds more than {MAX_SIMULATED_TIMES} nominal times of the "
                        "schedules simulated; shorten it or simulate fewer schedules (page_size)",
                    )
                ]
            )
        active = [dict(id=None, namespace=sched["namespace"], state=JobState.RUNNING)] * assume_active
        states.append(_State(pred, rec, after, OverlapState(assume_active, 0), list(active)))
    bucket = full_bucket(rate=model.catchup_rate, burst=model.catchup_burst, now=end)
    while not all(s.done for s in states):
        b = StepBuilder(now=end, shards=model.shards)
        stepped = [s for s in states if not s.done]
        for s in stepped:
            plan = plan_schedule(
                s.pred.schedule,
                s.rec,
                end,
                lookahead=model.lookahead,
                limit=model.max_step,
                planned_through=s.planned_through,
                carry=s.carry,
            )
            for d in plan.decisions:
                b.add(s.pred.schedule, d, source=OccurrenceSource.RULE, state=s.overlap, active=s.active)
            s.planned_through, s.carry, s.done = plan.planned_through, plan.carry, not plan.capped
        slots, bucket = catchup_slots(
            bucket, n=b.catchup_count, rate=model.catchup_rate, burst=model.catchup_burst, now=end
        )
        b.settle(slots)
        by_uid = {s.pred.schedule["uid"]: s.pred for s in stepped}
        for r in b.writes.records:
            if r["nominal_time"] <= end:  # an ALLOW schedule's step also plans ahead of T2
                by_uid[r["schedule_uid"]]._add(r, max_listed)
    return [s.pred for s in states]


def _assumptions(sched: Row, assume_active: int, model: PlannerModel) -> list[str]:
    out = []
    if sched["paused"]:
        out.append("the schedule is paused: nothing is planned; times are recorded SKIPPED_PAUSED on resume")
        return out
    out.append(
        "the planner's last step before the outage ran at its start and its first step after ran at its end"
    )
    ahead = horizon(sched, model.lookahead)
    if ahead:
        out.append(
            f"overlap ALLOW: times up to {ahead.total_seconds():g} s after the outage's start were "
            "planned ahead of it and are not counted"
        )
    out.append(
        f"{assume_active} earlier occurrence(s) assumed still active (queued or running) at the outage's end"
    )
    out.append(
        f"the catch-up budget ({model.catchup_rate:g} runs/s, burst {model.catchup_burst}) is full at "
        "the outage's end and shared only by the schedules simulated together"
    )
    if sched["overlap_policy"] in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL):
        out.append("BUFFERED runs start when the active occurrence finishes, which is not predicted")
    return out
