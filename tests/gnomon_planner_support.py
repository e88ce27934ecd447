"""Helpers for the planner tests (test_planner.py, test_schedule_planning.py): instants from ISO
strings, a Planner with given settings, schedules created through the ScheduleService servicer and
"rewound" in SQL to a creation instant in the past, planning until settled, and the occurrences and
jobs of a schedule read back. The servicer and engine are the ``planner_env`` fixture of conftest.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import text

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.common.config import PlannerSettings
from gnomon.planner.planning import Planner


def T(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(UTC)


def planner(engine, **kw) -> Planner:
    return Planner(engine, PlannerSettings(**kw), region="local", shards=8)


async def create(engine, api, sid: str, *, cron: str, tz: str = "UTC", created: str, **fields) -> dict:
    template = schedule_pb2.JobTemplate(queue="q")
    sched = schedule_pb2.Schedule(cron=cron, time_zone=tz, job_template=template, **fields)
    await api.CreateSchedule(pb.CreateScheduleRequest(schedule_id=sid, schedule=sched), None)
    async with engine.begin() as c:
        await c.execute(
            text(
                "UPDATE schedules SET planned_through = :t, plan_at = :t, next_fire_at = :t "
                "WHERE schedule_id = :s"
            ),
            {"t": T(created), "s": sid},
        )
        return dict(
            (await c.execute(text("SELECT * FROM schedules WHERE schedule_id = :s"), {"s": sid}))
            .mappings()
            .one()
        )


async def rows(engine, q: str, **params) -> list[dict]:
    async with engine.begin() as c:
        return [dict(r) for r in (await c.execute(text(q), params)).mappings()]


async def plan_until(p: Planner, now: datetime) -> None:
    for _ in range(200):
        st = await p.plan_once(now)
        if st.schedules == 0:
            return
    raise AssertionError("planning did not settle")


async def occurrences(engine, sid: str) -> list[dict]:
    return await rows(
        engine,
        "SELECT o.* FROM schedule_occurrences o JOIN schedules s ON s.uid = o.schedule_uid "
        "WHERE s.schedule_id = :s ORDER BY o.nominal_time",
        s=sid,
    )


async def jobs_of(engine, sid: str) -> list[dict]:
    return await rows(engine, "SELECT * FROM jobs WHERE schedule_id = :s ORDER BY nominal_time", s=sid)


async def set_state(engine, sid: str, state: str) -> None:
    async with engine.begin() as c:
        await c.execute(
            text(
                "UPDATE jobs SET state = :st, version = version + 1 WHERE schedule_id = :s "
                "AND state NOT IN ('SUCCEEDED', 'CANCELLED')"
            ),
            {"st": state, "s": sid},
        )
