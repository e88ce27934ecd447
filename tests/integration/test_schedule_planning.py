"""ScheduleService operations against the planner on a real PostgreSQL, with explicit clocks: preview
equals what fires; update, pause and resume replan pending occurrences by the database clock; trigger
is idempotent and obeys overlap; the reaper prunes old decision records; forged page tokens and
out-of-range instants are refused; delete withdraws undispatched occurrences.

Set up as in test_planner.py (gnomon_planner_support.py; the ``planner_env`` fixture in conftest.py).
"""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from sqlalchemy import text

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon_planner_support import T, create, jobs_of, occurrences, plan_until, planner, rows
from gnomon_planner_support import set_state as _set_state

pytestmark = pytest.mark.integration
env = pytest.fixture(lambda planner_env: planner_env)  # conftest.py: (engine, ScheduleServicer)


@pytest.mark.parametrize(
    "cron,tz,start,fold,gap",
    [
        ("0 2 * * *", "Europe/Berlin", "2023-10-27T00:00:00Z", "BOTH", "SKIP"),
        ("30 2 * * *", "America/New_York", "2013-03-08T00:00:00Z", "FIRST", "SHIFT_FORWARD"),
        ("0 * * * *", "America/Los_Angeles", "2026-10-31T20:00:00Z", "FIRST", "SHIFT_FORWARD"),
        ("*/20 * * * *", "Australia/Lord_Howe", "2026-04-04T10:00:00Z", "SECOND", "SKIP"),
        ("0 */2 * * *", "Africa/Cairo", "2025-04-24T12:00:00Z", "FIRST", "SHIFT_FORWARD"),
        ("15 1,2,3 * * 0", "Europe/London", "2026-10-20T00:00:00Z", "BOTH", "SHIFT_FORWARD"),
    ],
)
async def test_preview_equals_what_the_planner_fires(env, cron, tz, start, fold, gap):
    engine, api = env
    await create(
        engine,
        api,
        "pv",
        cron=cron,
        tz=tz,
        created=start,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        dst_fold=schedule_pb2.DstFoldPolicy.Value(f"DST_FOLD_POLICY_{fold}"),
        dst_gap=schedule_pb2.DstGapPolicy.Value(f"DST_GAP_POLICY_{gap}"),
    )
    from google.protobuf import timestamp_pb2

    from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb

    frm = timestamp_pb2.Timestamp()
    frm.FromDatetime(T(start))
    preview = await api.PreviewSchedule(
        spb.PreviewScheduleRequest(name="namespaces/default/schedules/pv", from_time=frm, count=40), None
    )
    expected = [f.fire_time.ToDatetime(tzinfo=UTC) for f in preview.fire_times if not f.skipped]
    skipped = [f.fire_time.ToDatetime(tzinfo=UTC) for f in preview.fire_times if f.skipped]
    assert len(expected) == 40
    p = planner(engine, lookahead_s=3600)
    t = T(start)
    while t <= expected[-1]:  # the planner runs through the window
        t += timedelta(minutes=30)
        await plan_until(p, t)
    fired = [j["nominal_time"] for j in await jobs_of(engine, "pv") if j["nominal_time"] <= expected[-1]]
    assert fired == expected
    occ = {o["nominal_time"]: o["decision"] for o in await occurrences(engine, "pv")}
    assert all(occ.get(s) == "SKIPPED_DST_GAP" for s in skipped if s <= expected[-1])


async def test_update_pause_resume_replan_pending_occurrences_by_the_database_clock(env):
    engine, api = env
    from google.protobuf import field_mask_pb2

    sched = schedule_pb2.Schedule(
        cron="* * * * *",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        job_template=schedule_pb2.JobTemplate(queue="q"),
    )
    s = (await api.CreateSchedule(pb.CreateScheduleRequest(schedule_id="re", schedule=sched), None)).schedule
    p = planner(engine, lookahead_s=600)
    await plan_until(p, None)  # jobs created up to 10 minutes ahead
    ahead = await rows(
        engine, "SELECT nominal_time FROM jobs WHERE schedule_id = 're' AND nominal_time > now()"
    )
    assert 9 <= len(ahead) <= 10 and all(j["nominal_time"].second == 0 for j in ahead)
    # a changed rule withdraws the pending ones and plans again under the new rule
    upd = schedule_pb2.Schedule(name=s.name, etag=s.etag, cron="30 * * * * *")
    got = (
        await api.UpdateSchedule(
            pb.UpdateScheduleRequest(schedule=upd, update_mask=field_mask_pb2.FieldMask(paths=["cron"])), None
        )
    ).schedule
    assert got.cron == "30 * * * * *" and got.etag == "2"
    await plan_until(p, None)
    ahead = await rows(
        engine, "SELECT nominal_time FROM jobs WHERE schedule_id = 're' AND nominal_time > now()"
    )
    assert 9 <= len(ahead) <= 10 and {j["nominal_time"].second for j in ahead} == {30}
    # a stale etag changes nothing
    from gnomon.common.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition):
        await api.UpdateSchedule(
            pb.UpdateScheduleRequest(
                schedule=schedule_pb2.Schedule(name=s.name, etag="1", cron="0 * * * *"),
                update_mask=field_mask_pb2.FieldMask(paths=["cron"]),
            ),
            None,
        )
    # pause withdraws them; resume plans again
    paused = await api.PauseSchedule(pb.PauseScheduleRequest(name=s.name), None)
    assert paused.schedule.paused and 9 <= paused.withdrawn_jobs <= 10
    assert await rows(engine, "SELECT id FROM jobs WHERE schedule_id = 're' AND nominal_time > now()") == []
    await plan_until(p, None)
    assert await rows(engine, "SELECT id FROM jobs WHERE schedule_id = 're' AND nominal_time > now()") == []
    await api.ResumeSchedule(pb.ResumeScheduleRequest(name=s.name), None)
    await plan_until(p, None)
    assert (
        len(await rows(engine, "SELECT id FROM jobs WHERE schedule_id = 're' AND nominal_time > now()")) >= 9
    )


async def test_trigger_is_idempotent_by_request_id_and_obeys_overlap(env):
    engine, api = env
    sched = schedule_pb2.Schedule(cron="0 0 1 1 *", job_template=schedule_pb2.JobTemplate(queue="q"))
    s = (await api.CreateSchedule(pb.CreateScheduleRequest(schedule_id="tr", schedule=sched), None)).schedule
    rid = "0b9c6f7e-3f5e-4c1a-9d2b-7a1e2c3d4f50"
    first = await api.TriggerSchedule(pb.TriggerScheduleRequest(name=s.name, request_id=rid), None)
    assert first.occurrence.decision == schedule_pb2.OCCURRENCE_DECISION_FIRED and first.job.name
    assert first.occurrence.source == schedule_pb2.OCCURRENCE_SOURCE_TRIGGER
    again = await api.TriggerSchedule(pb.TriggerScheduleRequest(name=s.name, request_id=rid), None)
    assert again.job.name == first.job.name and again.occurrence.name == first.occurrence.name
    # default overlap SKIP: the first triggered run is still SCHEDULED/QUEUED -> a new trigger is skipped
    other = await api.TriggerSchedule(pb.TriggerScheduleRequest(name=s.name), None)
    assert (
        other.occurrence.decision == schedule_pb2.OCCURRENCE_DECISION_SKIPPED_OVERLAP and not other.job.name
    )
    allowed = await api.TriggerSchedule(
        pb.TriggerScheduleRequest(name=s.name, overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW), None
    )
    assert allowed.occurrence.decision == schedule_pb2.OCCURRENCE_DECISION_FIRED
    assert len(await jobs_of(engine, "tr")) == 2


async def test_reaper_prunes_old_decision_records_but_keeps_buffered(env):
    engine, api = env
    from gnomon.common.storage import reaping
    from gnomon.common.storage.engine import run_transaction

    await create(
        engine,
        api,
        "old",
        cron="51 * * * *",
        created="2026-11-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_BUFFER_ONE,
    )
    await plan_until(planner(engine), T("2026-11-01T10:51:00.2Z"))
    await _set_state(engine, "old", "RUNNING")
    await plan_until(planner(engine), T("2026-11-01T11:51:00.2Z"))  # 11:51 BUFFERED
    async with engine.begin() as c:  # both decided 40 days ago
        await c.execute(text("UPDATE schedule_occurrences SET decided_at = now() - interval '40 days'"))
    n = await run_transaction(
        engine, lambda c: reaping.prune_decisions(c, region="local", retention_s=30 * 86400, limit=100)
    )
    assert n == 1
    assert [o["decision"] for o in await occurrences(engine, "old")] == ["BUFFERED"]


async def test_forged_page_tokens_and_out_of_range_instants_are_invalid_argument(env):
    engine, api = env
    import base64
    import hashlib
    import json

    from google.protobuf import timestamp_pb2

    from gnomon.common.errors import InvalidArgument

    await create(engine, api, "tok", cron="* * * * *", created="2026-12-01T10:00:00Z")
    filt = hashlib.sha256(b"default|None|").hexdigest()[:16]
    for forged in ({"f": filt}, {"f": filt, "a": {"x": 1}}, {"f": filt, "a": "a\u0000"}, [1, 2]):
        token = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
        with pytest.raises(InvalidArgument) as e:
            await api.ListSchedules(pb.ListSchedulesRequest(page_token=token), None)
        assert [v.field for v in e.value.violations] == ["page_token"]
    filt = hashlib.sha256(b"default|tok|None").hexdigest()[:16]
    for forged in (
        {"f": filt},
        {"f": filt, "b": "notadate"},
        {"f": filt, "b": 5},
        {"f": filt, "b": "2026-01-01"},
    ):
        token = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
        with pytest.raises(InvalidArgument):
            await api.ListScheduleOccurrences(
                pb.ListScheduleOccurrencesRequest(
                    parent="namespaces/default/schedules/tok", page_token=token
                ),
                None,
            )
    for seconds, nanos in ((253402300000, 0), (-62135596800, 0), (-99999999999, 0), (0, -5)):
        ts = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
        with pytest.raises(InvalidArgument) as e:
            await api.PreviewSchedule(
                pb.PreviewScheduleRequest(name="namespaces/default/schedules/tok", from_time=ts), None
            )
        assert [v.field for v in e.value.violations] == ["from_time"]
        with pytest.raises(InvalidArgument) as e:
            await api.BackfillSchedule(
                pb.BackfillScheduleRequest(
                    name="namespaces/default/schedules/tok",
                    start_time=ts,
                    end_time=timestamp_pb2.Timestamp(seconds=1_700_000_000),
                ),
                None,
            )
        assert "start_time" in [v.field for v in e.value.violations]


async def test_delete_withdraws_every_undispatched_occurrence_and_a_recreated_schedule_gets_new_keys(env):
    engine, api = env
    first = await create(
        engine,
        api,
        "again",
        cron="* * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    p = planner(engine, lookahead_s=0)
    for minute in (1, 2, 3):  # 3 due, none dispatched
        await plan_until(p, T(f"2026-12-01T10:0{minute}:00.5Z"))
    assert len(await jobs_of(engine, "again")) == 3
    got = await api.DeleteSchedule(pb.DeleteScheduleRequest(name="namespaces/default/schedules/again"), None)
    assert got.withdrawn_jobs == 3 and await jobs_of(engine, "again") == []
    second = await create(
        engine,
        api,
        "again",
        cron="* * * * *",
        created="2026-12-01T10:00:00Z",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
    )
    assert second["uid"] != first["uid"]
    await plan_until(planner(engine, lookahead_s=0), T("2026-12-01T10:01:00.5Z"))
    [job] = await jobs_of(engine, "again")
    assert job["idempotency_key"] == f"again.{second['uid'].hex[:12]}@2026-12-01T10:01:00.000000+00:00"
