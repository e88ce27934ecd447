"""The reaper's lost leases and a batch of failed results are written in a number of statements
that does not grow with the batch (one ``FAIL_MANY`` per batch, the shape of River's
``JobRescueMany``), on a real PostgreSQL, with every guarantee of the per-item writes they replace:
the compare-and-set on the attempt, the retry judgement (idempotent or not, attempts left), DEAD
after the last attempt with the dead-letter count, and the cancel rule.

Statements are counted on the driver: every statement the storage layer sends, through SQLAlchemy
or :mod:`gnomon.common.storage.raw`, is one psycopg ``AsyncCursor.execute``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from functools import partial

import psycopg
import pytest
from sqlalchemy import select, update

from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import reaping
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import fenced, new_job_spec, own_shards

pytestmark = pytest.mark.asyncio
TOKEN = 9


@pytest.fixture
async def engine(engine):
    """The test database's engine (conftest), shard 0 owned by "A" with fencing token ``TOKEN``."""
    await own_shards(engine, TOKEN)
    return engine


class Statements:
    """Counts the statements sent to the database (``AsyncCursor.execute`` calls) while on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on, self.count = False, 0
        real = psycopg.AsyncCursor.execute

        async def counted(cur, *args, **kw):
            if self.on:
                self.count += 1
            return await real(cur, *args, **kw)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)

    async def run(self, fn):
        """``await fn()`` with counting on; returns (its result, statements sent)."""
        self.on, self.count = True, 0
        try:
            return await fn(), self.count
        finally:
            self.on = False


@pytest.fixture
def statements(monkeypatch) -> Statements:
    return Statements(monkeypatch)


async def running_jobs(engine, n: int, *, idempotent=lambda i: True, max_attempts=3) -> list[AttemptKey]:
    """``n`` jobs claimed and accepted by worker "w1": their running attempts' keys, in creation order."""
    ids = [uuid.uuid4() for _ in range(n)]
    for i, jid in enumerate(ids):
        spec = new_job_spec(id=jid, idempotent=idempotent(i), max_attempts=max_attempts)
        await run_transaction(engine, partial(jobs_store.insert_job, new=spec))
    claimed = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=n + 10, dispatcher_id="A"),
    )
    by_id = {c.job_id: AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in claimed}
    keys = [by_id[j] for j in ids]
    accepted = await run_transaction(engine, lambda c: lease_store.accept(c, keys, "w1"))
    assert len(accepted) == n
    return keys


async def expire(engine, keys: list[AttemptKey]) -> None:
    async with engine.begin() as c:
        await c.execute(
            update(attempts)
            .where(attempts.c.job_id.in_([k.job_id for k in keys]))
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=30))
        )


async def states(engine, keys: list[AttemptKey]) -> list[tuple]:
    """(job state, job failure_class, attempt state, attempt failure_class) per key, in order."""
    async with engine.connect() as c:
        rows = (
            await c.execute(
                select(
                    jobs.c.id, jobs.c.state, jobs.c.failure_class, attempts.c.state, attempts.c.failure_class
                )
                .join(attempts, (attempts.c.job_id == jobs.c.id) & (attempts.c.attempt == 1))
                .where(jobs.c.id.in_([k.job_id for k in keys]))
            )
        ).all()
    got = {r[0]: tuple(r[1:]) for r in rows}
    return [got[k.job_id] for k in keys]


async def reap(engine, statements: Statements):
    return await statements.run(
        lambda: run_transaction(
            engine,
            lambda c: reaping.reap_lost_leases(
                c, region="local", skew_margin_s=1.0, limit=500, retry_delay_s=lambda a: 60
            ),
        )
    )


@pytest.mark.parametrize("n", [1, 50])
async def test_reaping_lost_attempts_sends_the_same_statements_for_one_as_for_fifty(engine, statements, n):
    # even jobs idempotent (retried), odd ones not (dead-lettered: an ambiguous outcome)
    keys = await running_jobs(engine, n, idempotent=lambda i: i % 2 == 0)
    await expire(engine, keys)
    reaped, sent = await reap(engine, statements)
    # two reads (expired leases, start_to_close timeouts) and one write for the batch: was 2 + 3 per attempt
    assert sent == 3
    want = ["SCHEDULED" if i % 2 == 0 else "DEAD" for i in range(n)]
    assert sorted((r.job_id, r.new_state) for r in reaped) == sorted(
        (k.job_id, s) for k, s in zip(keys, want, strict=True)
    )
    assert all(r.error == reaping.LOST_ERROR and (r.namespace, r.queue) == ("default", "q") for r in reaped)
    assert await states(engine, keys) == [(s, "AMBIGUOUS", "LOST", "AMBIGUOUS") for s in want]
    reaped, _ = await reap(engine, statements)
    assert reaped == []  # nothing left running; the attempts are LOST once


async def test_a_reaped_job_with_a_cancel_request_ends_cancelled_and_a_moved_on_job_is_left(
    engine, statements
):
    keys = await running_jobs(engine, 3)
    await expire(engine, keys)
    async with engine.begin() as c:
        await c.execute(
            update(jobs).where(jobs.c.id == keys[0].job_id).values(cancel_requested_at=datetime.now(UTC))
        )
        # keys[2]'s job moved on (as if a newer attempt were current): its attempt is LOST, the job untouched
        await c.execute(update(jobs).where(jobs.c.id == keys[2].job_id).values(attempt=2))
    reaped, sent = await reap(engine, statements)
    assert sent == 3
    assert {r.job_id: r.new_state for r in reaped} == {
        keys[0].job_id: "CANCELLED",
        keys[1].job_id: "SCHEDULED",
    }
    got = await states(engine, keys)
    assert [g[0] for g in got] == ["CANCELLED", "SCHEDULED", "QUEUED"]
    assert [g[2] for g in got] == ["LOST", "LOST", "LOST"]


async def fail(engine, statements: Statements, results: list[Result], dead: list):
    return await statements.run(
        lambda: run_transaction(
            engine, lambda c: result_store.complete(c, results, retry_delay_s=lambda r, a: 60, dead=dead)
        )
    )


@pytest.mark.parametrize("n", [1, 50])
async def test_a_batch_of_failed_results_sends_the_same_statements_for_one_as_for_fifty(
    engine, statements, n
):
    # max_attempts 1: a TRANSIENT failure is the last attempt -> DEAD; PERMANENT is never retried
    keys = await running_jobs(engine, n, max_attempts=1)
    more = await running_jobs(engine, n, max_attempts=3)
    results = [Result(k, False, "TRANSIENT", "boom", owner=None, worker_id="w1") for k in keys + more]
    results[-1] = Result(more[-1], False, "PERMANENT", "bad input")
    dead: list = []
    got, sent = await fail(engine, statements, results, dead)
    assert sent == 2  # the jobs read and one write for the batch: was 2 + 2 per failure
    assert set(got.values()) == {""}
    want = ["DEAD"] * n + ["SCHEDULED"] * (n - 1) + ["DEAD"]
    assert [s[0] for s in await states(engine, keys + more)] == want
    assert sorted(dead) == sorted(
        [("default", "q", "TRANSIENT")] * n + [("default", "q", "PERMANENT")]
    )  # the DLQ count
    assert {s[2] for s in await states(engine, keys + more)} == {"FAILED"}


async def test_stale_failures_in_a_batch_are_refused_and_change_nothing(engine, statements):
    keys = await running_jobs(engine, 3)
    stale = AttemptKey(keys[1].job_id, keys[1].attempt, keys[1].version, keys[1].token + 1)
    results = [
        Result(keys[0], False, "TRANSIENT", "boom"),
        Result(stale, False, "TRANSIENT", "boom"),
        Result(keys[2], False, "TRANSIENT", "boom", owner="mallory", worker_id="w9"),
    ]
    got, _ = await fail(engine, statements, results, [])
    assert got == {keys[0].id: "", keys[1].id: "STALE_FENCING_TOKEN", keys[2].id: "STALE_ATTEMPT"}
    assert [s[0] for s in await states(engine, keys)] == ["SCHEDULED", "QUEUED", "QUEUED"]
    assert [s[2] for s in await states(engine, keys)] == ["FAILED", "RUNNING", "RUNNING"]
    got, _ = await fail(engine, statements, results[:1], [])
    assert got == {keys[0].id: ""}  # the same result again: idempotent, nothing written twice
