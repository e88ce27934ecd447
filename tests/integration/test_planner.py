"""The planner against a real PostgreSQL, with explicit clocks (the planner's ``now`` override):
DST folds, misfire policies, the catch-up budget, hand-over, concurrent planners, overlap across a
restart, paused times, jitter.

Schedules are created through the ScheduleService servicer (the same code gRPC calls) and then
"rewound" in SQL to a creation instant in the past, so hours of schedule time take milliseconds
(gnomon_planner_support.py; the ``planner_env`` fixture is in conftest.py). The ScheduleService
operations around planning (preview, update, pause, trigger, delete, pruning) are in
test_schedule_planning.py.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import text

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon_planner_support import T, create, jobs_of, occurrences, plan_until, planner, rows
from gnomon_planner_support import set_state as _set_state

pytestmark = pytest.mark.integration
env = pytest.fixture(lambda planner_env: planner_env)  # conftest.py: (engine, ScheduleServicer)


@pytest.mark.parametrize(
    "fold,expected",
    [
        (schedule_pb2.DST_FOLD_POLICY_FIRST, ["2023-10-29T00:00:00+00:00"]),
        (schedule_pb2.DST_FOLD_POLICY_SECOND, ["2023-10-29T01:00:00+00:00"]),
        (schedule_pb2.DST_FOLD_POLICY_BOTH, ["2023-10-29T00:00:00+00:00", "2023-10-29T01:00:00+00:00"]),
    ],
)
async def test_case1_berlin_fold_policies_and_replay_creates_none(env, fold, expected):
    engine, api = env
    await create(
        engine,
        api,
        "berlin",
        cron="0 2 * * *",
        tz="Europe/Berlin",
        created="2023-10-28T12:00:00Z",
        dst_fold=fold,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    p = planner(engine, lookahead_s=0)
    for minutes in range(0, 24 * 60, 10):  # the planner runs through the day
        await plan_until(p, T("2023-10-28T12:00:00Z") + timedelta(minutes=minutes))
    js = await jobs_of(engine, "berlin")
    assert [j["nominal_time"].isoformat() for j in js] == expected
    # replaying planning for the same window writes nothing new
    async with engine.begin() as c:
        await c.execute(
            text("UPDATE schedules SET planned_through = :t, plan_at = :t"), {"t": T("2023-10-28T12:00:00Z")}
        )
    for minutes in range(0, 24 * 60, 10):
        await plan_until(p, T("2023-10-28T12:00:00Z") + timedelta(minutes=minutes))
    assert len(await jobs_of(engine, "berlin")) == len(expected)
    assert len(await occurrences(engine, "berlin")) == len(expected)


async def test_case5_coalesce_after_outage_every_minute(env):
    engine, api = env
    await create(
        engine,
        api,
        "minutely",
        cron="* * * * *",
        created="2026-12-01T08:28:30Z",
        misfire_policy=schedule_pb2.MISFIRE_POLICY_COALESCE,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    p = planner(engine, lookahead_s=0)
    await plan_until(p, T("2026-12-01T08:28:31Z"))  # planned up to 08:28:31: nothing due yet
    # down from 08:29 to 10:21: the planner comes back at 10:21:00.5
    await plan_until(p, T("2026-12-01T10:21:00.5Z"))
    occ = await occurrences(engine, "minutely")
    coalesced = [o for o in occ if o["decision"] == "COALESCED"]
    assert len(coalesced) == 1
    c = coalesced[0]
    assert c["missed_count"] == 112
    assert c["missed_first"] == T("2026-12-01T08:29:00Z") and c["missed_last"] == T("2026-12-01T10:20:00Z")
    skipped = [o for o in occ if o["decision"] == "SKIPPED_MISFIRE"]
    assert len(skipped) == 111 and all("coalesced into" in o["note"] for o in skipped)
    js = await jobs_of(engine, "minutely")
    assert [(j["nominal_time"], j["coalesced_count"]) for j in js] == [
        (T("2026-12-01T10:20:00Z"), 112),
        (T("2026-12-01T10:21:00Z"), None),
    ]
    # ... and the schedule keeps firing afterwards
    await plan_until(p, T("2026-12-01T10:23:00.2Z"))
    assert [j["nominal_time"] for j in await jobs_of(engine, "minutely")][-2:] == [
        T("2026-12-01T10:22:00Z"),
        T("2026-12-01T10:23:00Z"),
    ]


@pytest.mark.parametrize(
    "policy,runs,skipped",
    [
        (schedule_pb2.MISFIRE_POLICY_SKIP, ["2026-12-01T10:21:00+00:00"], 112),
        (
            schedule_pb2.MISFIRE_POLICY_RUN_LATEST,
            ["2026-12-01T10:20:00+00:00", "2026-12-01T10:21:00+00:00"],
            111,
        ),
    ],
)
async def test_case5_other_misfire_policies(env, policy, runs, skipped):
    engine, api = env
    await create(
        engine,
        api,
        "m",
        cron="* * * * *",
        created="2026-12-01T08:28:30Z",
        misfire_policy=policy,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    p = planner(engine, lookahead_s=0)
    await plan_until(p, T("2026-12-01T08:28:31Z"))
    await plan_until(p, T("2026-12-01T10:21:00.5Z"))  # down from 08:29 to 10:21
    occ = await occurrences(engine, "m")
    assert sum(o["decision"] == "SKIPPED_MISFIRE" for o in occ) == skipped
    assert [j["nominal_time"].isoformat() for j in await jobs_of(engine, "m")] == runs


async def test_misfire_backlog_larger_than_a_step_is_worked_off(env):
    engine, api = env
    await create(
        engine,
        api,
        "big",
        cron="* * * * * *",
        created="2026-12-01T00:00:00Z",
        misfire_policy=schedule_pb2.MISFIRE_POLICY_COALESCE,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    p = planner(engine, lookahead_s=0, max_step_occurrences=1000)
    await plan_until(p, T("2026-12-01T01:00:00.5Z"))  # 3,600 missed seconds, steps of 1,000
    js = await jobs_of(engine, "big")
    # missed: 00:00:01 .. 00:59:00 (older than now - 60 s grace) -> one coalesced run; then 60 on time
    assert len(js) == 1 + 60
    c = js[0]
    assert (c["coalesced_count"], c["coalesced_first"], c["coalesced_last"], c["nominal_time"]) == (
        3540,
        T("2026-12-01T00:00:01Z"),
        T("2026-12-01T00:59:00Z"),
        T("2026-12-01T00:59:00Z"),
    )
    assert [j["nominal_time"] for j in js[1:]] == [
        T("2026-12-01T00:59:01Z") + timedelta(seconds=i) for i in range(60)
    ]


async def test_case6_run_all_catchup_is_released_under_the_global_budget(env):
    engine, api = env
    for i in range(200):
        await create(
            engine,
            api,
            f"s{i:03d}",
            cron="* * * * *",
            created="2026-12-01T09:54:30Z",
            misfire_policy=schedule_pb2.MISFIRE_POLICY_RUN_ALL,
            max_catchup=3,
            overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        )
    now = T("2026-12-01T10:00:30Z")
    p = planner(engine, lookahead_s=0, catchup_rate=50.0, catchup_burst=10)
    await plan_until(p, now)
    # missed (older than now - 60 s grace): 09:55 .. 09:59 -> the latest 3 run; 10:00 is on time
    on_time = await rows(
        engine,
        "SELECT nominal_time, scheduled_at FROM jobs WHERE nominal_time = :t",
        t=T("2026-12-01T10:00:00Z"),
    )
    assert len(on_time) == 200 and {j["scheduled_at"] for j in on_time} == {T("2026-12-01T10:00:00Z")}
    late = await rows(
        engine,
        "SELECT nominal_time, scheduled_at FROM jobs WHERE nominal_time < :t ORDER BY scheduled_at",
        t=T("2026-12-01T10:00:00Z"),
    )
    assert len(late) == 600
    assert {j["nominal_time"] for j in late} == {
        T("2026-12-01T09:57:00Z"),
        T("2026-12-01T09:58:00Z"),
        T("2026-12-01T09:59:00Z"),
    }
    times = [j["scheduled_at"] for j in late]
    assert times[0] >= now and times[:10] == [now] * 10  # the burst goes at once ...
    span = (times[-1] - times[0]).total_seconds()
    assert span == pytest.approx((600 - 10) / 50.0, abs=0.05)  # ... the rest at 50 per second
    gaps = [(b - a).total_seconds() for a, b in zip(times[10:], times[11:])]
    assert max(gaps) <= 0.0201 and min(gaps) >= 0.0199


@pytest.mark.parametrize("overlap", [schedule_pb2.OVERLAP_POLICY_ALLOW, schedule_pb2.OVERLAP_POLICY_SKIP])
async def test_case7_hand_over_around_the_fire_time_plans_exactly_one(env, overlap):
    engine, api = env
    await create(
        engine, api, "ten", cron="0 10 * * *", created="2026-12-01T09:00:00Z", overlap_policy=overlap
    )
    a = planner(engine, lookahead_s=30)
    await plan_until(a, T("2026-12-01T09:59:57Z"))  # planner A plans, then is killed
    b = planner(engine, lookahead_s=30)  # a fresh process: nothing in memory
    await plan_until(b, T("2026-12-01T10:00:01Z"))
    await plan_until(a, T("2026-12-01T10:00:02Z"))  # even if A came back, it finds nothing to do
    js = await jobs_of(engine, "ten")
    assert [j["nominal_time"] for j in js] == [T("2026-12-01T10:00:00Z")]
    assert len(await occurrences(engine, "ten")) == 1


async def test_case8_concurrent_planners_never_duplicate(env):
    engine, api = env
    for i in range(20):
        await create(
            engine,
            api,
            f"c{i}",
            cron="* * * * * *",
            created="2026-12-01T10:00:00Z",
            overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        )
    ps = [planner(engine, lookahead_s=0, batch=3) for _ in range(4)]
    now = T("2026-12-01T10:00:30.5Z")
    for _ in range(30):
        await asyncio.gather(*(p.plan_once(now) for p in ps))
    dup = await rows(
        engine, "SELECT schedule_id, nominal_time, count(*) n FROM jobs GROUP BY 1, 2 HAVING count(*) > 1"
    )
    assert dup == []
    assert (await rows(engine, "SELECT count(*) n FROM jobs"))[0]["n"] == 20 * 30


async def test_case9_skip_overlap_holds_across_a_planner_restart(env):
    engine, api = env
    await create(
        engine,
        api,
        "x51",
        cron="51 * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_SKIP,
    )
    await plan_until(planner(engine), T("2026-12-01T10:51:00.2Z"))
    await _set_state(engine, "x51", "RUNNING")  # the 10:51 run is still running ...
    # ... when the planner process crashes; a new one plans 11:51 from the database state alone
    await plan_until(planner(engine), T("2026-12-01T11:51:00.3Z"))
    occ = await occurrences(engine, "x51")
    assert [(o["nominal_time"], o["decision"]) for o in occ] == [
        (T("2026-12-01T10:51:00Z"), "FIRED"),
        (T("2026-12-01T11:51:00Z"), "SKIPPED_OVERLAP"),
    ]
    assert len(await jobs_of(engine, "x51")) == 1


async def test_case9_buffer_one_runs_after_the_active_one_finishes(env):
    engine, api = env
    await create(
        engine,
        api,
        "b51",
        cron="51 * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_BUFFER_ONE,
    )
    await plan_until(planner(engine), T("2026-12-01T10:51:00.2Z"))
    await _set_state(engine, "b51", "RUNNING")
    p = planner(engine)  # restarted
    await plan_until(p, T("2026-12-01T12:51:00.3Z"))  # 11:51 buffered, 12:51 skipped (buffer full)
    occ = {o["nominal_time"]: o["decision"] for o in await occurrences(engine, "b51")}
    assert occ == {
        T("2026-12-01T10:51:00Z"): "FIRED",
        T("2026-12-01T11:51:00Z"): "BUFFERED",
        T("2026-12-01T12:51:00Z"): "SKIPPED_OVERLAP",
    }
    st = await p.release_once(T("2026-12-01T12:55:00Z"))
    assert st.jobs == 0  # still running: nothing released
    await _set_state(engine, "b51", "SUCCEEDED")
    st = await p.release_once(T("2026-12-01T12:56:00Z"))
    assert st.jobs == 1
    js = await jobs_of(engine, "b51")
    assert [(j["nominal_time"], j["scheduled_at"]) for j in js][-1] == (
        T("2026-12-01T11:51:00Z"),
        T("2026-12-01T12:56:00Z"),
    )
    occ = {o["nominal_time"]: o["decision"] for o in await occurrences(engine, "b51")}
    assert occ[T("2026-12-01T11:51:00Z")] == "LATE"


async def test_paused_times_are_recorded_skipped_paused(env):
    engine, api = env
    row = await create(
        engine,
        api,
        "p",
        cron="*/10 * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    async with engine.begin() as c:
        await c.execute(
            text("UPDATE schedules SET skip_through = :t WHERE uid = :u"),
            {"t": T("2026-12-01T10:35:00Z"), "u": row["uid"]},
        )
    await plan_until(planner(engine, lookahead_s=0), T("2026-12-01T10:40:00.1Z"))
    occ = [(o["nominal_time"].minute, o["decision"]) for o in await occurrences(engine, "p")]
    assert occ == [(10, "SKIPPED_PAUSED"), (20, "SKIPPED_PAUSED"), (30, "SKIPPED_PAUSED"), (40, "FIRED")]


async def test_jitter_is_deterministic_and_never_early(env):
    engine, api = env
    from google.protobuf import duration_pb2

    await create(
        engine,
        api,
        "j",
        cron="* * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        jitter=duration_pb2.Duration(seconds=20),
        misfire_grace=duration_pb2.Duration(seconds=3600),
    )
    await plan_until(planner(engine, lookahead_s=0), T("2026-12-01T10:10:00.5Z"))
    js = await jobs_of(engine, "j")
    delays = [(j["scheduled_at"] - j["nominal_time"]).total_seconds() for j in js]
    assert len(js) == 10 and all(0 <= d < 20 for d in delays) and len(set(delays)) > 1
