"""Pure-logic tests of the misfire classification and the overlap policy (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gnomon.common.scheduling import overlap
from gnomon.common.scheduling.misfire import Carry, MisfireRules, classify
from gnomon.common.time import Occurrence

UTC = UTC
T0 = datetime(2026, 12, 1, 8, 29, tzinfo=UTC)


def minutes(n: int, start: datetime = T0) -> list[Occurrence]:
    return [Occurrence(start + timedelta(minutes=i), start + timedelta(minutes=i), "") for i in range(n)]


def rules(policy: str, max_catchup: int = 100) -> MisfireRules:
    return MisfireRules(policy, timedelta(seconds=60), timedelta(hours=24), max_catchup)


NOW = T0 + timedelta(minutes=112, seconds=0.5)  # 10:21:00.5; 08:29 .. 10:20 missed, 10:21 on time


@pytest.mark.parametrize(
    "policy,runs,skipped",
    [
        ("SKIP", ["FIRED"], 112),
        ("RUN_LATEST", ["LATE", "FIRED"], 111),
        ("COALESCE", ["COALESCED", "FIRED"], 111),
        ("RUN_ALL", ["LATE"] * 112 + ["FIRED"], 0),
    ],
)
def test_misfire_policies_after_a_112_minute_outage(policy, runs, skipped):
    out, carry = classify(minutes(113), now=NOW, rules=rules(policy, 1000), skip_through=None)
    assert [d.decision for d in out if d.run] == runs
    assert sum(d.decision == "SKIPPED_MISFIRE" for d in out) == skipped
    assert carry == Carry()
    if policy == "COALESCE":
        [c] = [d for d in out if d.decision == "COALESCED"]
        assert (c.missed_count, c.missed_first, c.missed_last) == (112, T0, T0 + timedelta(minutes=111))
        assert c.catchup and c.nominal == c.missed_last


def test_run_all_keeps_the_latest_max_catchup():
    out, _ = classify(minutes(113), now=NOW, rules=rules("RUN_ALL", 5), skip_through=None)
    late = [d.nominal for d in out if d.decision == "LATE"]
    assert late == [T0 + timedelta(minutes=i) for i in range(107, 112)]
    assert sum(d.decision == "SKIPPED_MISFIRE" for d in out) == 107


def test_a_non_final_step_holds_back_its_last_missed_time_and_carries_the_coalesce_count():
    occs = minutes(50)
    out, carry = classify(occs, now=NOW, rules=rules("COALESCE"), skip_through=None, final=False)
    assert len(out) == 49 and all(d.decision == "SKIPPED_MISFIRE" for d in out)
    assert carry == Carry(49, T0)
    rest = minutes(63, T0 + timedelta(minutes=49))
    out, carry = classify(rest, now=NOW, rules=rules("COALESCE"), skip_through=None, carry=carry)
    [c] = [d for d in out if d.decision == "COALESCED"]
    assert (c.missed_count, c.missed_first) == (112, T0) and carry == Carry()


def test_paused_window_and_gap_markers_are_recorded_not_run():
    occs = minutes(3) + [Occurrence(T0 + timedelta(minutes=3), T0, "DST gap", skipped_dst_gap=True)]
    out, _ = classify(
        occs,
        now=T0 + timedelta(minutes=3, seconds=1),
        rules=rules("RUN_LATEST"),
        skip_through=T0 + timedelta(minutes=1),
    )
    assert [d.decision for d in out] == ["SKIPPED_PAUSED", "SKIPPED_PAUSED", "LATE", "SKIPPED_DST_GAP"]


def test_within_grace_is_late_and_on_time_is_fired():
    [late] = classify(minutes(1), now=T0 + timedelta(seconds=30), rules=rules("SKIP"), skip_through=None)[0]
    [fired] = classify(
        minutes(1), now=T0 + timedelta(milliseconds=200), rules=rules("SKIP"), skip_through=None
    )[0]
    assert (late.decision, late.run, late.catchup) == ("LATE", True, False)
    assert (fired.decision, fired.run) == ("FIRED", True)


@pytest.mark.parametrize(
    "policy,active,buffered,expected",
    [
        ("ALLOW", 3, 0, "CREATE"),
        ("SKIP", 0, 0, "CREATE"),
        ("SKIP", 1, 0, "SKIP"),
        ("BUFFER_ONE", 0, 0, "CREATE"),
        ("BUFFER_ONE", 1, 0, "BUFFER"),
        ("BUFFER_ONE", 1, 1, "SKIP"),
        ("BUFFER_ALL", 1, 5, "BUFFER"),
        ("BUFFER_ALL", 1, overlap.MAX_BUFFERED, "SKIP"),
        ("BUFFER_ALL", 0, 2, "BUFFER"),  # keeps nominal order behind the waiting ones
        ("CANCEL_OTHER", 2, 0, "CANCEL_AND_CREATE"),
        ("CANCEL_OTHER", 0, 0, "CREATE"),
    ],
)
def test_overlap_decide(policy, active, buffered, expected):
    state = overlap.OverlapState(active, buffered)
    action, note = overlap.decide(policy, state)
    assert action == expected
    if action in ("CREATE", "CANCEL_AND_CREATE"):
        assert state.active == (1 if action == "CANCEL_AND_CREATE" else active + 1)
    if action == "BUFFER":
        assert state.buffered == buffered + 1 and policy in note


def test_overlap_sequence_under_buffer_one_then_release():
    state = overlap.OverlapState(0, 0)
    assert [overlap.decide("BUFFER_ONE", state)[0] for _ in range(3)] == ["CREATE", "BUFFER", "SKIP"]
    assert overlap.release("BUFFER_ONE", state)[0] == "BUFFER"  # still active: keeps waiting
    state.active = 0  # the running one finished
    state.buffered -= 1
    assert overlap.release("BUFFER_ONE", state) == (
        "CREATE",
        "released after the previous occurrence finished",
    )
    assert overlap.release("SKIP", overlap.OverlapState(1, 1))[0] == "SKIP"
    assert overlap.release("ALLOW", overlap.OverlapState(1, 1))[0] == "CREATE"
