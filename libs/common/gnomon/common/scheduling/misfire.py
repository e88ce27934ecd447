"""Misfire classification: which nominal fire times of one planning step run, run late, coalesce or
are skipped (pure logic, no I/O). Semantics are in docs/schedules.md#misfire.

A nominal time ``t`` planned at database time ``now`` is

* ``SKIPPED_DST_GAP`` if the recurrence marked it (a non-existent local time not fired);
* ``SKIPPED_PAUSED`` if ``t <= skip_through`` (it passed while the schedule was paused);
* ``SKIPPED_MISFIRE`` if ``t < now - catchup_window`` (too old whatever the policy);
* *missed* if ``t < now - grace`` -> the misfire policy decides (below);
* otherwise on time: FIRED (planned no later than :data:`LATE_AFTER` after ``t``, or ahead of it)
  or LATE (later, but within the grace: it simply runs late).

Missed times under the policy: SKIP -> all SKIPPED_MISFIRE; RUN_LATEST -> the latest runs (LATE,
catch-up), the rest SKIPPED_MISFIRE; COALESCE -> the latest runs as one COALESCED catch-up run
carrying the count and range of all missed times, the rest SKIPPED_MISFIRE; RUN_ALL -> the latest
``max_catchup`` run (LATE, catch-up), older ones SKIPPED_MISFIRE.

A backlog longer than one step's cap is worked off over several steps: a step that did not reach the
present (``final=False``) holds its last missed time back for the next step, so the latest missed
time is always decided by the final step; COALESCE carries the count and first time over in
:class:`Carry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gnomon.common.domain.policies import MisfirePolicy, OccurrenceDecision
from gnomon.common.time import Occurrence

#: A run planned more than this after its nominal time is recorded LATE rather than FIRED.
LATE_AFTER = timedelta(seconds=1)

# The decisions (short names of :class:`OccurrenceDecision` members).
FIRED, LATE, COALESCED = OccurrenceDecision.FIRED, OccurrenceDecision.LATE, OccurrenceDecision.COALESCED
BUFFERED, DEDUPLICATED = OccurrenceDecision.BUFFERED, OccurrenceDecision.DEDUPLICATED
SKIPPED_OVERLAP, SKIPPED_MISFIRE = OccurrenceDecision.SKIPPED_OVERLAP, OccurrenceDecision.SKIPPED_MISFIRE
SKIPPED_DST_GAP, SKIPPED_PAUSED = OccurrenceDecision.SKIPPED_DST_GAP, OccurrenceDecision.SKIPPED_PAUSED
SKIPPED_QUOTA = OccurrenceDecision.SKIPPED_QUOTA


@dataclass(frozen=True)
class MisfireRules:
    """A schedule's misfire settings: ``policy`` (RUN_LATEST SKIP COALESCE RUN_ALL), ``grace`` and
    ``window`` spans, ``max_catchup`` (RUN_ALL bound)."""

    policy: str
    grace: timedelta
    window: timedelta
    max_catchup: int


@dataclass(frozen=True)
class Carry:
    """COALESCE state carried between planning steps: missed times already counted and the first one."""

    missed_count: int = 0
    missed_first: datetime | None = None


@dataclass(frozen=True)
class Decision:
    """The decision for one nominal time. ``run``: a job is wanted (still subject to the overlap
    policy); ``catchup``: it is a catch-up run, released under the global catch-up budget.
    ``missed_*`` are set on a COALESCED run."""

    nominal: datetime
    local_time: str
    decision: str
    note: str
    run: bool = False
    catchup: bool = False
    missed_count: int | None = None
    missed_first: datetime | None = None
    missed_last: datetime | None = None


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _secs(d: timedelta) -> str:
    return f"{d.total_seconds():g} s"


def classify(
    occs: list[Occurrence],
    *,
    now: datetime,
    rules: MisfireRules,
    skip_through: datetime | None,
    carry: Carry = Carry(),
    final: bool = True,
) -> tuple[list[Decision], Carry]:
    """Decides every occurrence of one planning step (ascending ``fire_time``, all after the
    schedule's high-water mark). Returns the decisions (in nominal order, possibly fewer than
    ``occs`` when ``final`` is false: the held-back tail is decided by the next step) and the
    :class:`Carry` for the next step."""
    decided: list[Decision] = []
    missed: list[Occurrence] = []
    window_start, late_edge = now - rules.window, now - rules.grace
    for o in occs:
        local = o.local_time.isoformat()
        if o.skipped_dst_gap:
            decided.append(Decision(o.fire_time, local, SKIPPED_DST_GAP, o.note))
        elif skip_through is not None and o.fire_time <= skip_through:
            decided.append(
                Decision(o.fire_time, local, SKIPPED_PAUSED, _join("the schedule was paused", o.note))
            )
        elif o.fire_time < window_start:
            decided.append(
                Decision(
                    o.fire_time,
                    local,
                    SKIPPED_MISFIRE,
                    _join(f"outside the catch-up window ({_secs(rules.window)})", o.note),
                )
            )
        elif o.fire_time < late_edge:
            missed.append(o)
        else:
            lag = now - o.fire_time
            if lag > LATE_AFTER:
                decided.append(
                    Decision(
                        o.fire_time,
                        local,
                        LATE,
                        _join(
                            f"planned {_secs(lag)} after its nominal time, within the misfire grace ({_secs(rules.grace)})",
                            o.note,
                        ),
                        run=True,
                    )
                )
            else:
                decided.append(Decision(o.fire_time, local, FIRED, o.note, run=True))
    if not final and missed and missed[-1] is occs[-1]:
        missed.pop()  # held back: the next step decides it (it may be the latest missed time)
    out, carry = _apply_policy(missed, rules, carry, final=final)
    merged = sorted(decided + out, key=lambda d: d.nominal)
    return merged, carry


def _apply_policy(
    missed: list[Occurrence], rules: MisfireRules, carry: Carry, *, final: bool
) -> tuple[list[Decision], Carry]:
    if not missed:
        return [], carry
    p = rules.policy
    grace = f"missed its time by more than the grace ({_secs(rules.grace)})"
    out: list[Decision] = []

    def skip(o: Occurrence, why: str) -> Decision:
        return Decision(o.fire_time, o.local_time.isoformat(), SKIPPED_MISFIRE, _join(grace, why, o.note))

    if p == MisfirePolicy.SKIP:
        return [skip(o, "misfire policy SKIP") for o in missed], carry
    if not final:
        # a longer backlog follows: none of these can be the latest missed time
        if p == MisfirePolicy.COALESCE:
            first = carry.missed_first or missed[0].fire_time
            return (
                [skip(o, "coalesced into the catch-up run") for o in missed],
                Carry(carry.missed_count + len(missed), first),
            )
        why = (
            "superseded by a later missed occurrence"
            if p == MisfirePolicy.RUN_LATEST
            else "beyond max_catchup"
        )
        return [skip(o, why) for o in missed], carry
    latest = missed[-1]
    if p == MisfirePolicy.RUN_LATEST:
        out = [
            skip(o, f"superseded by the RUN_LATEST catch-up run of {_fmt(latest.fire_time)}")
            for o in missed[:-1]
        ]
        out.append(
            Decision(
                latest.fire_time,
                latest.local_time.isoformat(),
                LATE,
                _join("catch-up run (misfire policy RUN_LATEST)", latest.note),
                run=True,
                catchup=True,
            )
        )
        return out, Carry()
    if p == MisfirePolicy.COALESCE:
        count = carry.missed_count + len(missed)
        first = carry.missed_first or missed[0].fire_time
        out = [skip(o, f"coalesced into the catch-up run of {_fmt(latest.fire_time)}") for o in missed[:-1]]
        out.append(
            Decision(
                latest.fire_time,
                latest.local_time.isoformat(),
                COALESCED,
                _join(
                    f"coalesced {count} missed nominal times {_fmt(first)} .. {_fmt(latest.fire_time)}",
                    latest.note,
                ),
                run=True,
                catchup=True,
                missed_count=count,
                missed_first=first,
                missed_last=latest.fire_time,
            )
        )
        return out, Carry()
    if p == MisfirePolicy.RUN_ALL:
        keep = missed[-rules.max_catchup :]
        out = [skip(o, f"beyond max_catchup ({rules.max_catchup})") for o in missed[: -len(keep)]]
        out += [
            Decision(
                o.fire_time,
                o.local_time.isoformat(),
                LATE,
                _join("catch-up run (misfire policy RUN_ALL)", o.note),
                run=True,
                catchup=True,
            )
            for o in keep
        ]
        return out, Carry()
    raise ValueError(f"unknown misfire policy {p}")
