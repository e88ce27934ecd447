"""Job admission (docs/api.md "Quotas") as pure logic: the policy table declares how every job-creating
method is admitted, QuotaGuard refuses a method that declares none, the planner's StepBuilder records
SKIPPED_QUOTA (never silent) once a namespace has no room and leaves a BUFFERED release waiting, and
a listing reads payloads only within its reply budget (docs/api.md "Reply byte budget")."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from gnomon.api.quotas import QuotaGuard
from gnomon.common.auth.policy import POLICY, Admission
from gnomon.common.pagination import REPLY_RESERVE_BYTES, ROW_ALLOWANCE_BYTES, rows_within_budget
from gnomon.common.scheduling.misfire import FIRED, Decision
from gnomon.common.scheduling.occurrences import StepBuilder
from gnomon.common.scheduling.overlap import OverlapState

#: Every method that writes jobs, and how (the API's servicers and the policy table must agree).
JOB_CREATING = {
    "/gnomon.v1.JobService/CreateJob": Admission.JOB,
    "/gnomon.v1.JobService/BatchCreateJobs": Admission.REQUESTS,
    "/gnomon.v1.ScheduleService/TriggerSchedule": Admission.TRIGGER,
    "/gnomon.v1.ScheduleService/BackfillSchedule": Admission.BACKFILL,
    "/gnomon.v1.DeadLetterService/ReplayDeadLetters": Admission.REPLAY,
}


def test_every_job_creating_method_declares_its_admission_beside_its_permission():
    declared = {m: r.admits for m, r in POLICY.items() if r.admits is not None and r.admits.counts}
    assert declared == JOB_CREATING
    # created at once: they take create-rate tokens; paced ones do not
    assert {m for m, a in declared.items() if a.rated} == {
        "/gnomon.v1.JobService/CreateJob",
        "/gnomon.v1.JobService/BatchCreateJobs",
        "/gnomon.v1.ScheduleService/TriggerSchedule",
    }


def test_every_mutating_method_declares_its_admission_or_explicitly_none():
    undeclared = sorted(m for m, r in POLICY.items() if r.mutating and r.admits is None)
    assert not undeclared, f"declare admits= (Admission.NONE if it creates no job): {undeclared}"
    # a method that declares a counting admission writes (ReplayDeadLetters is audited by the replay
    # itself, so it is not marked mutating); a read-only method declares nothing
    for m, r in POLICY.items():
        if not r.mutating and m not in JOB_CREATING:
            assert r.admits is None, m


def test_a_method_without_an_admission_cannot_be_admitted():
    guard = QuotaGuard(None)  # refused before any read
    with pytest.raises(ValueError, match="declares no admission"):
        asyncio.run(guard.admit("/gnomon.v1.JobService/CancelJob", "ns", 1))
    with pytest.raises(ValueError, match="declares no admission"):
        guard.admitter("/gnomon.v1.JobService/GetJob", "ns")
    asyncio.run(guard.admit("/gnomon.v1.JobService/CreateJob", "ns", 0))  # nothing to admit, no read


def test_the_handler_layer_binds_each_call_its_own_admission():
    from gnomon.common.rpc.admission import bound, current_admit

    made = []

    def admitter(method, ns):
        made.append((method, ns))
        return lambda conn, n: None

    replay = "/gnomon.v1.DeadLetterService/ReplayDeadLetters"
    with bound(admitter, replay, POLICY[replay], "acme"):
        assert current_admit() is not None
    assert current_admit() is None and made == [(replay, "acme")]
    cancel = "/gnomon.v1.JobService/CancelJob"
    with bound(admitter, cancel, POLICY[cancel], "acme"):  # declares NONE: nothing bound
        assert current_admit() is None
    with bound(None, replay, POLICY[replay], "acme"):  # a server without job quotas
        assert current_admit() is None
    assert made == [(replay, "acme")]


#: The quota guard's admission methods: only the handler layer may reach them.
_ADMISSION_CALLS = {"admit", "admitter", "admit_jobs", "admit_pending"}


def test_no_servicer_or_engine_calls_the_admission_itself():
    """Admission is decided in one place: the interceptor binds it (gnomon.common.rpc.admission) and
    the engines call what it bound. No API module but the guard itself calls the guard's admission
    methods, and no servicer imports the admission pieces but ``current_admit``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    api = root / "services" / "api" / "gnomon" / "api"
    found = []
    for path in sorted(api.rglob("*.py")):
        if path.name == "quotas.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _ADMISSION_CALLS
            ):
                found.append(f"{path.name}:{node.lineno}: .{node.func.attr}(...)")
            if isinstance(node, ast.ImportFrom) and path.name.endswith("servicer.py"):
                names = {a.name for a in node.names}
                if node.module == "gnomon.common.rpc.admission" and names - {"current_admit"}:
                    found.append(f"{path.name}:{node.lineno}: imports {sorted(names)}")
    assert not found, "admit through current_admit() (bound by the interceptor):\n" + "\n".join(found)
    # the wiring: the API hands the guard's admitter to its server, nowhere else
    service = (api / "service.py").read_text(encoding="utf-8")
    assert "admitter=quotas.admitter" in service


NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def _sched(ns: str = "acme", policy: str = "ALLOW") -> dict:
    return dict(
        uid=uuid.uuid4(),
        namespace=ns,
        region="local",
        schedule_id="s",
        queue="q",
        payload=b"",
        max_attempts=3,
        idempotent=False,
        lease_ms=30_000,
        start_deadline_ms=None,
        start_to_close_ms=None,
        jitter_ms=0,
        overlap_policy=policy,
        version=1,
        retry_initial_ms=1000,
        retry_max_ms=60_000,
        retry_multiplier=2.0,
        retry_jitter=0.0,
        max_age_ms=None,
        non_retryable_errors=None,
    )


def _run(b: StepBuilder, sched: dict, state: OverlapState, k: int) -> dict:
    nominal = NOW - timedelta(seconds=10 - k)
    d = Decision(nominal, nominal.isoformat(), FIRED, "", run=True)
    return b.add(sched, d, source="RULE", state=state, active=[])


def test_runs_past_the_room_are_recorded_skipped_quota_and_create_no_job():
    b = StepBuilder(now=NOW, shards=4, room={"acme": 2})
    sched, other = _sched(), _sched("other")
    state = OverlapState(active=0, buffered=0)
    recs = [_run(b, sched, state, k) for k in range(4)]
    assert [r["decision"] for r in recs] == ["FIRED", "FIRED", "SKIPPED_QUOTA", "SKIPPED_QUOTA"]
    assert all(r["job_id"] is None for r in recs[2:])
    assert "max_pending_jobs" in recs[2]["note"]
    assert len(b.writes.jobs) == 2 and state.active == 2  # a skipped run is not active
    # a namespace absent from the room has no limit
    assert _run(b, other, OverlapState(0, 0), 0)["decision"] == "FIRED"


def test_a_quota_skip_leaves_the_overlap_state_as_it_was():
    b = StepBuilder(now=NOW, shards=4, room={"acme": 0})
    state = OverlapState(active=1, buffered=0)
    rec = _run(b, _sched(policy="CANCEL_OTHER"), state, 0)
    assert rec["decision"] == "SKIPPED_QUOTA"
    assert (state.active, state.buffered) == (1, 0)
    assert not b._cancels  # nothing cancelled for a run that does not happen


def test_a_buffered_release_waits_for_room_instead_of_being_skipped():
    sched = _sched(policy="BUFFER_ALL")
    rec = dict(
        schedule_uid=sched["uid"], nominal_time=NOW, overlap_policy="BUFFER_ALL", source="RULE", note=""
    )
    state = OverlapState(active=0, buffered=1)
    full = StepBuilder(now=NOW, shards=4, room={"acme": 0})
    assert full.add_release(sched, rec, state=state, active=[]) is False
    assert (state.active, state.buffered) == (0, 1) and not full.writes.record_updates
    roomy = StepBuilder(now=NOW, shards=4, room={"acme": 1})
    assert roomy.add_release(sched, rec, state=state, active=[]) is True
    assert len(roomy.writes.jobs) == 1 and state.buffered == 0


def test_rows_within_budget_counts_payloads_plus_an_allowance_and_always_one():
    big = 256 * 1024
    budget = 4 * 1024 * 1024
    fits = (budget - REPLY_RESERVE_BYTES) // (big + ROW_ALLOWANCE_BYTES)
    assert rows_within_budget([big] * 1000, 1000, budget) == fits == 15
    assert rows_within_budget([big] * 1000, 10, budget) == 10  # the page size caps it
    assert rows_within_budget([10 * budget], 100, budget) == 1  # one oversize row goes alone
    assert rows_within_budget([], 100, budget) == 0
    assert rows_within_budget([0] * 1000, 1000, budget) == 1000  # small rows: the whole page


def test_the_list_gate_gives_each_principal_its_turns_and_refuses_after_the_wait():
    from gnomon.api.list_gate import ListGate
    from gnomon.common.errors import Unavailable

    async def scenario() -> None:
        gate = ListGate(per_principal=1, wait_s=0.2)
        release = asyncio.Event()

        async def hold() -> None:
            async with gate.turn("evil"):
                await release.wait()

        holder = asyncio.create_task(hold())
        for _ in range(100):
            if gate.running("evil"):
                break
            await asyncio.sleep(0.01)
        assert gate.running("evil") == 1
        async with gate.turn("acme"):  # another principal is not held up
            assert gate.running("acme") == 1
        with pytest.raises(Unavailable) as e:  # evil's second call waits, then is refused
            async with gate.turn("evil"):
                pass
        assert e.value.reason == "LISTINGS_BUSY" and e.value.code.name == "UNAVAILABLE"
        waiter = asyncio.create_task(hold())  # waits its turn, then runs
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, waiter), 5)
        assert gate.running("evil") == 0 and not gate._turns  # nothing kept once idle

    asyncio.run(scenario())


def test_the_list_gate_refuses_at_once_past_the_waiting_calls_of_a_principal():
    from gnomon.api.list_gate import MAX_WAITING, ListGate
    from gnomon.common.errors import Unavailable

    async def scenario() -> None:
        gate = ListGate(per_principal=1, wait_s=30)
        release = asyncio.Event()
        entered = []
        first_in = asyncio.Event()

        async def hold(i: int) -> None:
            async with gate.turn("evil"):
                entered.append(i)
                first_in.set()
                await release.wait()

        tasks = [asyncio.create_task(hold(0))]
        await asyncio.wait_for(first_in.wait(), 5)
        tasks += [asyncio.create_task(hold(i)) for i in range(1, 1 + MAX_WAITING)]
        await asyncio.sleep(0.05)
        assert gate.running("evil") == 1
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(Unavailable) as e:  # one call past the waiting ones: no 30 s wait
            async with gate.turn("evil"):
                pass
        assert e.value.reason == "LISTINGS_BUSY"
        assert asyncio.get_running_loop().time() - t0 < 1
        async with gate.turn("acme"):  # another principal still gets its turn at once
            assert gate.running("acme") == 1
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert sorted(entered) == list(range(1 + MAX_WAITING))  # every waiter got its turn

    asyncio.run(scenario())
