"""The planner's release step is fair across namespaces and does not spin (real PostgreSQL, a real
:class:`gnomon.planner.planning.Planner` loop in this event loop; the ScheduleService servicer of the
``planner_env`` fixture creates the schedules).

Namespace ``full`` (``max_pending_jobs`` 1, held at its limit by one pending job) has more schedules
with a BUFFERED (backfilled) occurrence than one release step takes (``batch`` 4); namespace ``ok``
has one. ``ok``'s occurrence must be released within a few seconds, ``full``'s must stay BUFFERED
(the quota holds), and the planner loop must sleep between release steps instead of claiming the
same blocked schedules over and over: over a quiet window it runs about one release step per
``buffer_poll_s``, not hundreds.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from sqlalchemy import text

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.common.config import PlannerSettings
from gnomon.common.quotas import Quotas
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage.namespaces import NamespaceRecord
from gnomon.planner.planning import Planner
from gnomon_planner_support import rows
from gnomon_test_support import DIALECTS

env = pytest.fixture(lambda planner_env: planner_env)  # conftest.py: (engine, ScheduleServicer)
dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)

BATCH = 4
FULL_SCHEDULES = 3 * BATCH + 1
POLL_S = 0.5
QUIET_S = 3.0


async def buffered_schedule(engine, api, namespace: str, sid: str) -> None:
    """A schedule (yearly, so the rule plans nothing now) with one BUFFERED backfilled occurrence an
    hour ago, written as BackfillSchedule leaves it (record + ``schedules.buffered``)."""
    template = schedule_pb2.JobTemplate(queue="parked")
    sched = schedule_pb2.Schedule(cron="0 0 1 1 *", time_zone="UTC", job_template=template)
    req = pb.CreateScheduleRequest(parent=f"namespaces/{namespace}", schedule_id=sid, schedule=sched)
    await api.CreateSchedule(req, None)
    async with engine.begin() as c:
        await c.execute(
            text(
                "INSERT INTO schedule_occurrences (schedule_uid, nominal_time, namespace, region, "
                "local_time, decision, source, note, decided_at, overlap_policy) "
                "SELECT uid, now() - interval '1 hour', namespace, region, '', 'BUFFERED', 'BACKFILL', "
                "'', now(), 'ALLOW' FROM schedules WHERE namespace = :ns AND schedule_id = :s"
            ),
            {"ns": namespace, "s": sid},
        )
        await c.execute(
            text("UPDATE schedules SET buffered = 1 WHERE namespace = :ns AND schedule_id = :s"),
            {"ns": namespace, "s": sid},
        )


async def decisions(engine, namespace: str) -> list[str]:
    return [
        r["decision"]
        for r in await rows(
            engine, "SELECT decision FROM schedule_occurrences WHERE namespace = :ns", ns=namespace
        )
    ]


async def test_a_namespace_at_its_quota_neither_starves_other_releases_nor_spins_the_planner(env):
    engine, api = env
    async with engine.begin() as c:
        await ns_store.create_namespace(c, NamespaceRecord("full", "", 3600, Quotas(max_pending_jobs=1)))
    # "full"'s schedules first, so they are the ones an unordered claim finds first
    for i in range(FULL_SCHEDULES):
        await buffered_schedule(engine, api, "full", f"f{i:02d}-{uuid.uuid4().hex[:6]}")
    p = Planner(
        engine,
        PlannerSettings(batch=BATCH, buffer_poll_s=POLL_S, max_idle_poll_s=POLL_S),
        region="local",
        shards=8,
    )
    # one release takes full's only room: a pending job (no dispatcher runs here), full is at its limit
    for _ in range(FULL_SCHEDULES):
        await p.release_once()
    assert sorted(await decisions(engine, "full")).count("BUFFERED") == FULL_SCHEDULES - 1
    await buffered_schedule(engine, api, "ok", "ok")

    steps = 0
    release_once = p.release_once

    async def counted(now=None):
        nonlocal steps
        steps += 1
        return await release_once(now)

    p.release_once = counted
    stop = asyncio.Event()
    loop = asyncio.create_task(p.run(stop))
    try:
        t0 = time.monotonic()
        while await decisions(engine, "ok") == ["BUFFERED"]:
            assert time.monotonic() - t0 < 15, "ok's buffered occurrence was not released within 15 s"
            await asyncio.sleep(0.1)
        assert (await decisions(engine, "ok"))[0] in ("FIRED", "LATE")

        before = steps
        await asyncio.sleep(QUIET_S)
        quiet = steps - before
        # about QUIET_S / POLL_S rounds of at most two release steps; a spinning loop runs hundreds
        bound = 4 * int(QUIET_S / POLL_S) + 4
        assert quiet <= bound, f"{quiet} release steps in {QUIET_S} s with nothing to release (> {bound})"
        assert sorted(await decisions(engine, "full")).count("BUFFERED") == FULL_SCHEDULES - 1
        pending = await rows(
            engine, "SELECT id FROM jobs WHERE namespace = 'full' AND state IN ('SCHEDULED', 'QUEUED')"
        )
        assert len(pending) == 1  # the planner never passes full's max_pending_jobs
    finally:
        stop.set()
        p.wake.set()
        await asyncio.wait_for(loop, 30)
    print(f"release steps over a quiet {QUIET_S} s: {quiet}")
