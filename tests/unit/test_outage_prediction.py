"""The outage simulator's prediction (pure, no servers): what the planner does after a stop from T1
to T2 under each misfire policy, a catch-up window shorter than the outage, DST gap and fold inside
the outage, overlap with a run assumed active, the global catch-up budget spreading catch-up runs,
start deadlines, bounds, and a multi-step backlog deciding like a single step (Hypothesis)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.common.errors import InvalidArgument
from gnomon.common.scheduling.outage import PlannerModel, simulate
from gnomon.common.storage.schedules import rule_spec_of
from gnomon.common.time import compile_rule

MODEL = PlannerModel(
    lookahead=timedelta(seconds=30), max_step=1000, catchup_rate=20.0, catchup_burst=20, shards=64
)
T1 = datetime(2026, 3, 2, 8, 28, 30, tzinfo=UTC)  # the planner's last step before the outage
T2 = datetime(2026, 3, 2, 10, 21, 0, 500000, tzinfo=UTC)  # its first step after it
# With the default grace (60 s), 08:29 .. 10:20 are missed (older than T2 - 60 s) and 10:21 is only
# late: it is decided like an on-time run, after the catch-up run of the same step.
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def row(sid: str = "s", **kw) -> dict:
    """A ``schedules`` row with the defaults of CreateSchedule (every minute, RUN_LATEST, SKIP)."""
    r = dict(
        namespace="default",
        schedule_id=sid,
        uid=uuid.uuid5(uuid.NAMESPACE_URL, sid),
        region="local",
        rule_kind="CRON",
        expression="* * * * *",
        interval_ms=None,
        time_zone="UTC",
        dst_gap="SHIFT_FORWARD",
        dst_fold="FIRST",
        start_time=None,
        end_time=None,
        misfire_policy="RUN_LATEST",
        misfire_grace_ms=60_000,
        catchup_window_ms=86_400_000,
        max_catchup=100,
        overlap_policy="SKIP",
        jitter_ms=0,
        queue="q",
        payload=b"{}",
        max_attempts=3,
        lease_ms=30_000,
        idempotent=False,
        start_to_close_ms=None,
        start_deadline_ms=None,
        retry_initial_ms=1000,
        retry_max_ms=60_000,
        retry_multiplier=2.0,
        retry_jitter=0.2,
        max_age_ms=None,
        non_retryable_errors=None,
        paused=False,
        skip_through=None,
        version=1,
        created_at=CREATED,
        planned_through=CREATED,
        missed_count=0,
        missed_first=None,
        buffered=0,
    )
    r.update(kw)
    return r


def predict(*rows: dict, start=T1, end=T2, model=MODEL, **kw):
    out = simulate(
        [(r, compile_rule(rule_spec_of(r))) for r in rows], start=start, end=end, model=model, **kw
    )
    return out if len(rows) > 1 else out[0]


def at(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2026, 3, 2, h, m, s, tzinfo=UTC)


def test_coalesce_one_run_for_112_missed_minutes():
    p = predict(row(misfire_policy="COALESCE"))
    assert (p.missed_count, p.missed_first, p.missed_last) == (113, at(8, 29), at(10, 21))
    assert p.run_count == 1 and len(p.runs) == 1
    run = p.runs[0]
    assert run["decision"] == "COALESCED" and run["nominal_time"] == at(10, 20)
    assert (run["missed_count"], run["missed_first"], run["missed_last"]) == (112, at(8, 29), at(10, 20))
    assert run["scheduled_at"] == T2 and p.catchup_finish == T2
    skipped, overlap = p.skipped
    assert (skipped.decision, skipped.count, skipped.first, skipped.last) == (
        "SKIPPED_MISFIRE",
        111,
        at(8, 29),
        at(10, 19),
    )
    assert "coalesced into the catch-up run of 2026-03-02T10:20:00Z" in skipped.note
    # 10:21, within the grace, finds the catch-up run active: overlap SKIP (the default)
    assert (overlap.decision, overlap.count, overlap.first) == ("SKIPPED_OVERLAP", 1, at(10, 21))


def test_skip_runs_nothing():
    p = predict(row(misfire_policy="SKIP"))
    assert [(r["decision"], r["nominal_time"], r["scheduled_at"]) for r in p.runs] == [
        ("FIRED", at(10, 21), at(10, 21))  # 0.5 s late (under 1 s): FIRED, at its own time
    ]
    assert p.catchup_finish == at(10, 21)
    assert [(s.decision, s.count) for s in p.skipped] == [("SKIPPED_MISFIRE", 112)]
    assert "misfire policy SKIP" in p.skipped[0].note


def test_run_latest_runs_the_latest_and_skips_the_rest():
    p = predict(row())
    assert [(r["decision"], r["nominal_time"]) for r in p.runs] == [("LATE", at(10, 20))]
    assert [(s.decision, s.count) for s in p.skipped] == [("SKIPPED_MISFIRE", 111), ("SKIPPED_OVERLAP", 1)]
    assert "superseded by the RUN_LATEST catch-up run of 2026-03-02T10:20:00Z" in p.skipped[0].note


def test_grace_times_run_late_and_overlap_skip_then_skips_them():
    # T2 = 10:21:30: 10:21 is within the 60 s grace (LATE, not a catch-up); 10:20 is missed
    end = at(10, 21, 30)
    p = predict(row(overlap_policy="ALLOW"), end=end)
    assert [(r["decision"], r["nominal_time"], r["scheduled_at"]) for r in p.runs] == [
        ("LATE", at(10, 20), end),
        ("LATE", at(10, 21), at(10, 21)),  # within the grace: its own time, no budget slot
    ]
    # under the default overlap SKIP, the catch-up run is active when 10:21 is decided
    p = predict(row(), end=end)
    assert [r["nominal_time"] for r in p.runs] == [at(10, 20)]
    assert p.skipped[-1].decision == "SKIPPED_OVERLAP" and p.skipped[-1].first == at(10, 21)


def test_allow_times_planned_ahead_before_the_outage_are_not_counted():
    p = predict(row(overlap_policy="ALLOW", misfire_policy="COALESCE"))
    # planned through T1 + 30 s = 08:29:00 before the outage: 08:29 was created ahead of it
    assert (p.missed_count, p.missed_first) == (112, at(8, 30))
    assert p.runs[0]["missed_count"] == 111 and p.runs[1]["nominal_time"] == at(10, 21)
    assert any("planned ahead" in a for a in p.assumptions)


def test_catchup_window_shorter_than_the_outage():
    p = predict(row(misfire_policy="COALESCE", catchup_window_ms=3_600_000))
    # window start 09:21:00.5: 08:29 .. 09:21 are too old whatever the policy
    assert [(s.decision, s.count, s.first, s.last) for s in p.skipped] == [
        ("SKIPPED_MISFIRE", 53, at(8, 29), at(9, 21)),
        ("SKIPPED_MISFIRE", 58, at(9, 22), at(10, 19)),
        ("SKIPPED_OVERLAP", 1, at(10, 21), at(10, 21)),
    ]
    assert "outside the catch-up window (3600 s)" in p.skipped[0].note
    assert p.runs[0]["missed_count"] == 59 and p.runs[0]["missed_first"] == at(9, 22)


def test_run_all_keeps_max_catchup_spread_by_the_global_budget():
    p = predict(row(misfire_policy="RUN_ALL", max_catchup=50, overlap_policy="ALLOW"))
    assert p.run_count == 51 and p.runs[0]["nominal_time"] == at(9, 31)  # 50 catch-up runs + 10:21
    slots = [r["scheduled_at"] for r in p.runs[:50]]
    # a full bucket lets 20 go at T2, then one every 1/20 s
    assert slots[:20] == [T2] * 20
    assert slots[20:] == [T2 + timedelta(milliseconds=50 * i) for i in range(1, 31)]
    assert p.catchup_finish == T2 + timedelta(seconds=1.5)
    assert [(s.decision, s.count) for s in p.skipped] == [("SKIPPED_MISFIRE", 61)]
    assert "beyond max_catchup (50)" in p.skipped[0].note


def test_two_schedules_share_the_budget_in_nominal_order():
    a = row("a", misfire_policy="RUN_ALL", max_catchup=30, overlap_policy="ALLOW")
    b = row("b", misfire_policy="RUN_ALL", max_catchup=30, overlap_policy="ALLOW", expression="*/2 * * * *")
    pa, pb = predict(a, b)
    edge = T2 - timedelta(seconds=60)  # the catch-up runs: missed by more than the grace
    slots = sorted(
        (r["nominal_time"], r["scheduled_at"]) for r in pa.runs + pb.runs if r["nominal_time"] < edge
    )
    assert len(slots) == 60
    assert [s for _, s in slots] == sorted(s for _, s in slots)  # earlier nominal, earlier slot
    assert max(pa.catchup_finish, pb.catchup_finish) == T2 + timedelta(milliseconds=50 * 40)


def test_run_latest_with_a_run_assumed_active():
    p = predict(row(), assume_active=1)
    assert p.run_count == 0
    catchup = next(s for s in p.skipped if s.first == at(10, 20))
    assert catchup.decision == "SKIPPED_OVERLAP"
    assert "overlap policy SKIP: 1 earlier occurrence(s) still active" in catchup.note
    p = predict(row(overlap_policy="BUFFER_ONE"), assume_active=1)
    assert [r["decision"] for r in p.runs] == ["BUFFERED"] and p.runs[0]["scheduled_at"] is None
    p = predict(row(overlap_policy="CANCEL_OTHER"), assume_active=1)
    assert [r["decision"] for r in p.runs] == ["LATE", "FIRED"]  # 10:20 cancels; 10:21 cancels 10:20
    assert "cancelled 1 earlier active occurrence(s)" in p.runs[0]["note"]


def test_start_deadline_drops_catchup_runs():
    p = predict(
        row(misfire_policy="RUN_ALL", max_catchup=3, overlap_policy="ALLOW", start_deadline_ms=90_000)
    )
    # 10:20 + 90 s > T2: runs; 10:18 and 10:19 would start past their deadline
    assert [r["nominal_time"] for r in p.runs] == [at(10, 20), at(10, 21)]
    assert p.skipped[-1].count == 2 and "past its start deadline" in p.skipped[-1].note


def test_dst_gap_inside_the_outage():
    r = row(expression="30 2 * * *", time_zone="America/New_York", dst_gap="SKIP")
    start, end = datetime(2013, 3, 9, 12, tzinfo=UTC), datetime(2013, 3, 12, 12, tzinfo=UTC)
    p = predict(dict(r, created_at=start - timedelta(days=1)), start=start, end=end)
    assert [(s.decision, s.first) for s in p.skipped] == [
        ("SKIPPED_DST_GAP", datetime(2013, 3, 10, 7, 30, tzinfo=UTC)),
        ("SKIPPED_MISFIRE", datetime(2013, 3, 11, 6, 30, tzinfo=UTC)),
    ]
    assert "does not exist" in p.skipped[0].note
    assert [(x["decision"], x["nominal_time"]) for x in p.runs] == [
        ("LATE", datetime(2013, 3, 12, 6, 30, tzinfo=UTC))
    ]


def test_dst_fold_both_passes_inside_the_outage():
    r = row(
        expression="30 1 * * *",
        time_zone="America/New_York",
        dst_fold="BOTH",
        misfire_policy="RUN_ALL",
        overlap_policy="ALLOW",
    )
    start, end = datetime(2013, 11, 3, 0, tzinfo=UTC), datetime(2013, 11, 3, 12, tzinfo=UTC)
    p = predict(dict(r, created_at=start - timedelta(days=1)), start=start, end=end)
    assert [(x["nominal_time"], x["local_time"]) for x in p.runs] == [
        (datetime(2013, 11, 3, 5, 30, tzinfo=UTC), "2013-11-03T01:30:00-04:00"),
        (datetime(2013, 11, 3, 6, 30, tzinfo=UTC), "2013-11-03T01:30:00-05:00"),
    ]
    assert all(x["scheduled_at"] == end for x in p.runs)


def test_paused_and_created_after_the_outage_plan_nothing():
    assert predict(row(paused=True)).missed_count == 0
    assert predict(row(created_at=T2)).missed_count == 0
    later = predict(row(created_at=at(10, 0), misfire_policy="COALESCE"))
    assert later.missed_first == at(10, 1)  # never fires for times before its creation


@pytest.mark.parametrize(
    ("start", "end", "why"),
    [
        (T2, T1, "must be after"),
        (T1, T1, "must be after"),
        (T1, T1 + timedelta(days=367), "at most 366 days"),
    ],
)
def test_bad_windows_are_invalid_argument(start, end, why):
    with pytest.raises(InvalidArgument) as e:
        predict(row(), start=start, end=end)
    assert e.value.violations[0].field == "outage_end_time" and why in e.value.violations[0].description


def test_too_many_nominal_times_are_invalid_argument():
    with pytest.raises(InvalidArgument) as e:
        predict(row(expression="* * * * * *"), start=T1, end=T1 + timedelta(days=2))
    assert "more than 100000 nominal times" in e.value.violations[0].description


@settings(max_examples=25, deadline=None)
@given(
    step=st.integers(min_value=2, max_value=150),
    policy=st.sampled_from(["COALESCE", "RUN_LATEST", "SKIP"]),
    window_min=st.integers(min_value=1, max_value=200),
)
def test_a_backlog_over_many_steps_decides_like_one_step(step, policy, window_min):
    r = row(misfire_policy=policy, catchup_window_ms=window_min * 60_000)
    one = predict(r)
    many = predict(r, model=PlannerModel(MODEL.lookahead, step, 20.0, 20, 64))
    strip = lambda p: [(x["decision"], x["nominal_time"], x["missed_count"]) for x in p.runs]  # noqa: E731
    assert (many.missed_count, strip(many)) == (one.missed_count, strip(one))


def test_listing_is_bounded_and_the_counts_complete():
    # a 1-day grace: every time after the catch-up run is only late, found it active and skipped with
    # a note naming its own lag, so each is a range of its own
    p = predict(row(misfire_policy="COALESCE", misfire_grace_ms=86_400_000), max_listed=5)
    assert p.missed_count == 113 and p.run_count == 1 and p.runs[0]["decision"] == "LATE"
    assert len(p.skipped) == 5 and p.skipped_count == 112
    assert all(s.decision == "SKIPPED_OVERLAP" and s.count == 1 for s in p.skipped)
    p = predict(row(misfire_policy="RUN_ALL", overlap_policy="ALLOW", max_catchup=1000), max_listed=7)
    assert (len(p.runs), p.run_count) == (7, 112)


@settings(max_examples=30, deadline=None)
@given(
    policy=st.sampled_from(["COALESCE", "RUN_LATEST", "SKIP", "RUN_ALL"]),
    overlap=st.sampled_from(["ALLOW", "SKIP", "BUFFER_ONE", "BUFFER_ALL", "CANCEL_OTHER"]),
    expression=st.sampled_from(["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *"]),
    minutes=st.integers(min_value=1, max_value=3000),
    grace_s=st.integers(min_value=0, max_value=3600),
    active=st.integers(min_value=0, max_value=2),
)
def test_every_nominal_time_is_accounted_for_once(policy, overlap, expression, minutes, grace_s, active):
    r = row(
        misfire_policy=policy,
        overlap_policy=overlap,
        expression=expression,
        time_zone="America/New_York",
        misfire_grace_ms=grace_s * 1000,
        max_catchup=5,
    )
    end = T1 + timedelta(minutes=minutes)
    p = predict(r, end=end, assume_active=active)
    assert p.missed_count == p.run_count + p.skipped_count
    assert sum(s.count for s in p.skipped) == p.skipped_count  # few ranges: none cut
    times = [x["nominal_time"] for x in p.runs]
    assert times == sorted(times) and all(T1 < t <= end for t in times)
    assert all(
        x["scheduled_at"] is None or x["scheduled_at"] >= x["nominal_time"] for x in p.runs
    )  # never early
    assert sum(x["decision"] == "COALESCED" for x in p.runs) <= 1
