"""The accept writes only the attempt row (docs/concepts.md, the job lifecycle): the ``jobs`` row
stays QUEUED at the claim's version while its attempt runs, and RUNNING, ``started_at`` and the
version a client sees are derived from the current attempt (gnomon.common.storage.job_view). On a
real PostgreSQL: the accept's own transaction updates no ``jobs`` tuple; readers (get, list, the
pending count) see the job RUNNING; results, the reaper and cancel move it as before; a row written
RUNNING by the previous release's accept is read and finished the same way."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select, text

from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import CancelOutcome
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage import reaping
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_attempt_support import TOKEN, accept_as_previous_release, claim, new_job

pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture
async def engine(engine):
    from gnomon_test_support import own_shards

    await own_shards(engine, TOKEN)
    return engine


async def _stored(engine, jid: uuid.UUID) -> dict:
    """The ``jobs`` row as stored, with its ``xmin`` (changes on any update of the row)."""
    async with engine.connect() as c:
        q = select(text("jobs.xmin::text AS xmin"), jobs).where(jobs.c.id == jid)
        return dict((await c.execute(q)).mappings().one())


async def _claimed(engine) -> tuple[uuid.UUID, AttemptKey]:
    jid = await new_job(engine)
    c1 = await claim(engine, jid)
    return jid, AttemptKey(jid, c1.attempt, c1.version, c1.token)


async def _get(engine, jid: uuid.UUID) -> dict:
    return await run_transaction(engine, lambda c: jobs_store.get_job(c, "default", jid))


async def _listed(engine, state: str) -> set[uuid.UUID]:
    rows, _ = await run_transaction(
        engine,
        lambda c: jobs_store.list_jobs(c, "default", state=state, queue=None, limit=100, after=None),
    )
    return {r["id"] for r in rows}


async def test_the_accept_updates_the_attempt_row_and_no_job_row(engine):
    jid, k = await _claimed(engine)
    before = await _stored(engine, jid)

    # the backend's not yet reported counters (pg_stat_xact_*), read before and after inside the
    # accept's transaction: nothing reports them meanwhile, so the difference is the accept's own
    stat = text(
        "SELECT relname, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname IN ('jobs', 'attempts')"
    )

    async def accept(c):
        first = dict((await c.execute(stat)).all())
        got = await lease_store.accept(c, [k], "w1", "alice")
        after = dict((await c.execute(stat)).all())
        return got, {t: after[t] - first[t] for t in after}

    got, updated = await run_transaction(engine, accept)
    assert list(got) == [(jid, k.attempt)]
    assert updated == {"jobs": 0, "attempts": 1}
    assert await _stored(engine, jid) == before  # the row, xmin included: never written
    assert before["state"] == "QUEUED"


async def test_a_running_job_reads_running_with_its_start_time_and_the_next_version(engine):
    jid, k = await _claimed(engine)
    queued = await _get(engine, jid)
    assert (queued["state"], queued["version"], queued["started_at"]) == ("QUEUED", k.version, None)
    assert jid in await _listed(engine, "QUEUED") and jid not in await _listed(engine, "RUNNING")
    pending = await run_transaction(engine, lambda c: ns_store.count_pending_jobs(c, "default", cap=10))
    await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1"))
    job = await _get(engine, jid)
    async with engine.connect() as c:
        accepted_at = (
            await c.execute(select(attempts.c.accepted_at).where(attempts.c.job_id == jid))
        ).scalar_one()
    # what the accept used to write on the job row: RUNNING, version + 1, started_at = accept time
    assert (job["state"], job["version"], job["started_at"]) == ("RUNNING", k.version + 1, accepted_at)
    assert jid in await _listed(engine, "RUNNING") and jid not in await _listed(engine, "QUEUED")
    # a running job is not pending (quota max_pending_jobs, namespace deletion)
    assert await run_transaction(engine, lambda c: ns_store.count_pending_jobs(c, "default", cap=10)) == (
        pending - 1
    )


async def test_results_refuse_stale_ones_and_end_a_running_job_one_version_later(engine):
    jid, k = await _claimed(engine)
    await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1", "alice"))
    seen = (await _get(engine, jid))["version"]

    def result(key: AttemptKey, owner="alice", worker="w1") -> Result:
        return Result(key=key, succeeded=True, owner=owner, worker_id=worker)

    stale = [
        (AttemptKey(jid, k.attempt, k.version, k.token + 1), ErrorReason.STALE_FENCING_TOKEN),
        (AttemptKey(jid, k.attempt, k.version + 1, k.token), ErrorReason.STALE_ATTEMPT),
    ]
    for key, reason in stale:
        got = await run_transaction(engine, lambda c, key=key: result_store.complete(c, [result(key)]))
        assert got == {(jid, k.attempt): reason}
    foreign = await run_transaction(engine, lambda c: result_store.complete(c, [result(k, owner="mallory")]))
    assert foreign == {(jid, k.attempt): ErrorReason.STALE_ATTEMPT}
    assert (await _get(engine, jid))["state"] == "RUNNING"
    assert await run_transaction(engine, lambda c: result_store.complete(c, [result(k)])) == {
        (jid, k.attempt): ""
    }
    done = await _get(engine, jid)
    assert (done["state"], done["version"]) == ("SUCCEEDED", seen + 1)
    assert done["started_at"] is not None and done["finished_at"] >= done["started_at"]


async def test_cancelling_a_running_job_requests_it_and_a_failure_then_cancels(engine):
    jid, k = await _claimed(engine)
    await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1"))
    seen = (await _get(engine, jid))["version"]
    with pytest.raises(Exception, match="STALE_VERSION|not "):
        await run_transaction(
            engine, lambda c: cancel_store.cancel_job(c, "default", jid, expected_version=seen - 1)
        )
    res = await run_transaction(
        engine, lambda c: cancel_store.cancel_job(c, "default", jid, expected_version=seen)
    )
    assert res.outcome == CancelOutcome.CANCEL_REQUESTED
    assert (res.job["state"], res.job["version"]) == ("RUNNING", seen + 1)
    assert res.job["cancel_requested_at"] is not None
    again = await run_transaction(engine, lambda c: cancel_store.cancel_job(c, "default", jid))
    assert (again.outcome, again.job["version"]) == (CancelOutcome.CANCEL_REQUESTED, seen + 1)
    failed = Result(key=k, succeeded=False, failure_class="TRANSIENT", error="stopped")
    assert await run_transaction(engine, lambda c: result_store.complete(c, [failed])) == {
        (jid, k.attempt): ""
    }
    end = await _get(engine, jid)
    assert (end["state"], end["version"]) == ("CANCELLED", seen + 2)


async def test_a_cancel_between_claim_and_accept_refuses_the_accept(engine):
    jid, k = await _claimed(engine)
    res = await run_transaction(engine, lambda c: cancel_store.cancel_job(c, "default", jid))
    assert res.outcome == CancelOutcome.CANCELLED
    assert await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1")) == {}
    assert (await _get(engine, jid))["state"] == "CANCELLED"


async def test_lease_expiry_of_a_running_attempt_retries_its_job(engine):
    jid, k = await _claimed(engine)
    await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1"))
    seen = (await _get(engine, jid))["version"]
    async with engine.begin() as c:  # the lease ended a minute ago (database clock)
        await c.execute(
            attempts.update()
            .where(attempts.c.job_id == jid)
            .values(lease_expires_at=text("now() - interval '1 minute'"))
        )
    reaped = await run_transaction(
        engine,
        lambda c: reaping.reap_lost_leases(
            c, region="local", skew_margin_s=1.0, limit=10, retry_delay_s=lambda _a: 0.0
        ),
    )
    assert [(r.job_id, r.new_state) for r in reaped] == [(jid, "SCHEDULED")]
    job = await _get(engine, jid)
    assert (job["state"], job["version"], job["attempt"]) == ("SCHEDULED", seen + 1, 1)
    c2 = await claim(engine, jid)
    assert c2.attempt == 2


async def test_a_job_accepted_by_the_previous_release_reads_and_finishes_the_same(engine):
    jid, k = await _claimed(engine)
    assert await run_transaction(engine, lambda c: accept_as_previous_release(c, k))
    stored = await _stored(engine, jid)
    job = await _get(engine, jid)
    assert (job["state"], job["version"], job["started_at"]) == (
        "RUNNING",
        k.version + 1,
        stored["started_at"],
    )
    assert jid in await _listed(engine, "RUNNING")
    res = await run_transaction(engine, lambda c: cancel_store.cancel_job(c, "default", jid))
    assert (res.outcome, res.job["version"]) == (CancelOutcome.CANCEL_REQUESTED, k.version + 2)
    ok = Result(key=k, succeeded=True)
    assert await run_transaction(engine, lambda c: result_store.complete(c, [ok])) == {(jid, k.attempt): ""}
    end = await _get(engine, jid)
    assert (end["state"], end["version"], end["started_at"]) == (
        "SUCCEEDED",
        k.version + 3,
        stored["started_at"],
    )


def _documented_downgrade() -> str:
    """The downgrade statement as docs/operations.md gives it (the SQL block after "Downgrading")."""
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    block = doc[doc.index("* **Downgrading**") :]
    return block[block.index("```sql") + len("```sql") : block.index("```", block.index("```sql") + 6)]


async def test_the_documented_downgrade_gives_running_jobs_the_previous_form_unchanged_to_clients(engine):
    jid, k = await _claimed(engine)
    other, _ = await _claimed(engine)  # claimed, not accepted: stays QUEUED
    await run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1"))
    seen, queued = await _get(engine, jid), await _get(engine, other)
    async with engine.begin() as c:
        await c.execute(text(_documented_downgrade()))
    stored = await _stored(engine, jid)
    assert (stored["state"], stored["version"]) == ("RUNNING", k.version + 1)
    assert await _get(engine, jid) == seen and await _get(engine, other) == queued
    # the previous release's result on it (its statement needs the row RUNNING)
    async with engine.begin() as c:
        n = await c.execute(
            text(
                "UPDATE jobs SET state = 'SUCCEEDED', version = version + 1 WHERE id = :id AND state = 'RUNNING'"
            ),
            {"id": jid},
        )
        assert n.rowcount == 1


async def _until_one_waits_on_a_lock(engine) -> None:
    """Returns once a session of this database waits on a lock (pg_stat_activity, a fresh snapshot
    each poll); AssertionError after ~10 s."""
    q = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(500):
        async with engine.connect() as c:
            if (await c.execute(q)).scalar():
                return
        await asyncio.sleep(0.02)
    raise AssertionError("no session waited on a lock")


async def test_a_cancel_racing_an_uncommitted_accept_waits_and_requests_the_cancel(engine):
    """The accept writes only the attempt, so the cancel of a job still QUEUED locks that attempt
    first: it waits for the accept and then finds the job RUNNING (a request, never a CANCELLED job
    whose attempt runs)."""
    jid, k = await _claimed(engine)
    async with engine.connect() as c1:
        tx = await c1.begin()
        assert await lease_store.accept(c1, [k], "w1")
        cancelling = asyncio.create_task(
            run_transaction(engine, lambda c: cancel_store.cancel_job(c, "default", jid))
        )
        await _until_one_waits_on_a_lock(engine)
        await tx.commit()
        res = await cancelling
    assert (res.outcome, res.job["state"], res.job["version"]) == (
        CancelOutcome.CANCEL_REQUESTED,
        "RUNNING",
        k.version + 2,
    )
    async with engine.connect() as c:
        att = (await c.execute(select(attempts.c.state, attempts.c.cancel_requested))).one()
    assert tuple(att) == ("RUNNING", True)


async def test_an_accept_racing_an_uncommitted_cancel_waits_and_is_refused(engine):
    jid, k = await _claimed(engine)
    async with engine.connect() as c1:
        tx = await c1.begin()
        res = await cancel_store.cancel_job(c1, "default", jid)
        assert res.outcome == CancelOutcome.CANCELLED
        accepting = asyncio.create_task(run_transaction(engine, lambda c: lease_store.accept(c, [k], "w1")))
        await _until_one_waits_on_a_lock(engine)
        await tx.commit()
        assert await accepting == {}
    async with engine.connect() as c:
        att = (await c.execute(select(attempts.c.state))).scalar_one()
    assert (att, (await _get(engine, jid))["state"]) == ("CANCELLED", "CANCELLED")
