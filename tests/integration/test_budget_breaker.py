"""The per-queue retry budget and circuit breaker against a real PostgreSQL (no processes): the
claim takes at most the budget's retries and pushes the rest back without using attempts; breaker
state changes are compare-and-set (two evaluators agree), OPEN stops claims, HALF_OPEN lets a
bounded number of probes through."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from gnomon.common.config import BreakerSettings, RetryBudgetSettings
from gnomon.common.domain.attempts import AttemptKey, Claimed, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import queues as qstore
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import attempts, jobs, queue_state
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon_test_support import DIALECTS, fenced, new_job_spec, own_shards

TOKEN = 3
Q = ("default", "q")


# Every statement runs through both dialects (the cockroachdb+psycopg dialect runs against PostgreSQL
# as well).
dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)


@pytest.fixture
async def engine(engine):
    """The test database's engine (conftest), shard 0 owned by "A" with fencing token ``TOKEN``."""
    await own_shards(engine, TOKEN)
    return engine


async def new_jobs(engine, n, queue="q") -> list[uuid.UUID]:
    batch = []
    for _ in range(n):
        jid = uuid.uuid4()
        batch.append(new_job_spec(id=jid, queue=queue, max_attempts=10))
    await run_transaction(engine, lambda c: jobs_store.insert_jobs(c, batch))
    return [b.id for b in batch]


async def claim(engine, limit=1000, **kw) -> list[Claimed]:
    return await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[Q], limit=limit, dispatcher_id="A", **kw),
    )


async def run_and_finish(engine, claimed, *, ok: bool, failure_class="TRANSIENT"):
    keys = [AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in claimed]
    await run_transaction(engine, lambda c: lease_store.accept(c, keys, "w1"))
    res = await run_transaction(
        engine,
        lambda c: result_store.complete(
            c,
            [
                Result(key=k, succeeded=ok, failure_class=failure_class, error="RuntimeError: down")
                for k in keys
            ],
            retry_delay_s=lambda r, a: 0,
        ),
    )
    assert set(res.values()) <= {""}


async def test_claim_takes_at_most_the_budget_and_pushes_the_other_retries_back(engine):
    ids = await new_jobs(engine, 20)
    first = await claim(engine)
    assert len(first) == 20
    await run_and_finish(engine, first, ok=False)  # 20 retries due now
    fresh = await new_jobs(engine, 1)  # a first attempt queued behind them
    budget = RetryBudget(RetryBudgetSettings(ratio=0.2, window_s=60, min_per_s=0.05), region="local")
    caps = await run_transaction(engine, lambda c: budget.caps(c, [Q]))
    cap = caps[Q]
    assert (cap.allowed, cap.used, cap.retries) == (4, 0, 4)  # max(0.2 * 20, 0.05 * 60)
    assert cap.spacing_s == pytest.approx(15.0)  # 60 s / 4 retries
    got = await claim(engine, retry_cap=cap.retries, defer_step_s=cap.spacing_s)
    retries = [c for c in got if c.attempt == 2]
    assert len(retries) == 4 and [c.job_id for c in got if c.attempt == 1] == fresh
    budget.spent(Q, len(retries), cap)
    async with engine.connect() as c:
        held = (
            await c.execute(
                select(
                    jobs.c.attempt,
                    jobs.c.state,
                    jobs.c.version,
                    func.extract("epoch", jobs.c.scheduled_at - func.now()),
                ).where(jobs.c.id.in_(ids), jobs.c.attempt == 1)
            )
        ).all()
    assert len(held) == 16
    assert all(r[1] == "SCHEDULED" for r in held)  # waiting, no attempt used
    waits = sorted(float(r[3]) for r in held)
    assert waits[0] >= 14 and waits[-1] <= 16 * 15 + 1  # k-th excess retry: k * 15 s
    assert len({round(w) for w in waits}) == 16  # spread, not one burst
    # this dispatcher's own use counts at once; after the cache period the database says the same
    assert (await run_transaction(engine, lambda c: budget.caps(c, [Q])))[Q].retries == 0
    budget._windows.clear()
    again = (await run_transaction(engine, lambda c: budget.caps(c, [Q])))[Q]
    assert (again.used, again.retries) == (4, 0)
    counts = await run_transaction(
        engine, lambda c: qstore.budget_counts(c, region="local", namespace="default", queue="q", window_s=60)
    )
    assert (counts.first_attempts, counts.retries) == (21, 4)
    async with engine.connect() as c:  # attempts carry their queue
        assert (
            await c.execute(
                select(func.count()).where(attempts.c.queue == "q", attempts.c.namespace == "default")
            )
        ).scalar() == 25


async def test_budget_counts_are_the_claims_counted_per_second_not_attempt_rows(engine):
    """The window counts come from ``queue_claims`` (written by the claim statement itself), not from
    reading attempt rows: exact whatever their number, and unchanged when retention deletes the
    attempts; rows older than the counters' retention are pruned."""
    from gnomon.common.storage import queue_counts
    from gnomon.common.storage.schema import queue_claims

    await new_jobs(engine, 30)
    claimed = await claim(engine, limit=12)
    await run_and_finish(engine, claimed[:5], ok=False)  # 5 retries due at once
    await claim(engine, limit=100)  # 18 first attempts and the 5 retries
    async with engine.begin() as c:  # retention takes the attempt rows (the jobs stay)
        await c.execute(attempts.delete())
    got = await run_transaction(
        engine, lambda c: qstore.budget_counts(c, region="local", namespace="default", queue="q", window_s=60)
    )
    assert (got.first_attempts, got.retries, got.estimated) == (30, 5, False)
    async with engine.connect() as c:
        rows = (await c.execute(select(func.sum(queue_claims.c.first_attempts), func.count()))).one()
    assert rows[0] == 30 and 1 <= rows[1] <= 3  # one row per queue, second and dispatcher
    async with engine.begin() as c:  # as if claimed two hours ago
        await c.execute(
            update(queue_claims).values(bucket_start=queue_claims.c.bucket_start - timedelta(hours=2))
        )
    old = await run_transaction(
        engine, lambda c: qstore.budget_counts(c, region="local", namespace="default", queue="q", window_s=60)
    )
    assert (old.first_attempts, old.retries) == (0, 0)
    pruned = await run_transaction(engine, lambda c: queue_counts.prune_counts(c, region="local", limit=100))
    assert pruned == rows[1]
    async with engine.connect() as c:
        assert (await c.execute(select(func.count()).select_from(queue_claims))).scalar() == 0


def breakers(engine, **kw) -> Breakers:
    s = BreakerSettings(
        **{"window_s": 30, "min_results": 5, "failure_ratio": 0.5, "open_s": 1, "probes": 2, **kw}
    )
    return Breakers(engine, s, region="local", targets=lambda: {Q})


async def state_row(engine):
    return await run_transaction(
        engine, lambda c: qstore.get_state(c, region="local", namespace="default", queue="q")
    )


async def age_open(engine, seconds=5):
    async with engine.begin() as c:
        await c.execute(
            update(queue_state).values(opened_at=queue_state.c.opened_at - timedelta(seconds=seconds))
        )


async def test_breaker_opens_once_for_two_evaluators_and_stops_claims(engine):
    a, b = breakers(engine), breakers(engine)
    await new_jobs(engine, 6)
    assert await a.evaluate_once() == []  # creates the CLOSED row, nothing finished yet
    got = await claim(engine)
    await run_and_finish(engine, got[:2], ok=True)
    await run_and_finish(engine, got[2:], ok=False)  # 4 failures of 6 results: 0.67 >= 0.5
    made = await asyncio.gather(a.evaluate_once(), b.evaluate_once())
    assert sum(len(m) for m in made) == 1  # compare-and-set: one transition, one log line
    [tr] = [t for m in made for t in m]
    assert (tr.from_state, tr.to_state, tr.results) == ("CLOSED", "OPEN", 6)
    assert tr.failure_ratio == pytest.approx(4 / 6)
    assert a.state(Q) == b.state(Q) == "OPEN"
    row = await state_row(engine)
    assert (row["state"], row["opened_count"]) == ("OPEN", 1) and row["opened_at"] is not None
    assert await claim(engine) == []  # 4 retries due, but the breaker is open
    assert await a.evaluate_once() == []  # open period (1 s) not over yet


async def test_half_open_lets_the_probes_through_then_closes(engine):
    br = breakers(engine)
    await new_jobs(engine, 10)
    await br.evaluate_once()
    await run_and_finish(engine, await claim(engine), ok=False)
    assert [t.to_state for t in await br.evaluate_once()] == ["OPEN"]
    await age_open(engine)
    assert [t.to_state for t in await br.evaluate_once()] == ["HALF_OPEN"]
    assert await claim(engine) == []  # a CLOSED-mode claim takes nothing

    async def probe_claim(fx):
        n = await br.probe_allowance(fx.conn, Q)
        return (
            await claim_store.claim_due(
                fx, targets=[Q], limit=n, dispatcher_id="A", breaker_state="HALF_OPEN"
            )
            if n
            else []
        )

    probes = await fenced(engine, {0: TOKEN}, probe_claim)
    assert len(probes) == 2  # GNOMON_BREAKER_PROBES
    assert await fenced(engine, {0: TOKEN}, probe_claim) == []  # both still live
    await run_and_finish(engine, probes[:1], ok=True)
    assert await br.evaluate_once() == []  # 1 of 2 probes succeeded so far
    await run_and_finish(engine, probes[1:], ok=True)
    assert [t.to_state for t in await br.evaluate_once()] == ["CLOSED"]
    assert len(await claim(engine)) == 8  # dispatching again
    # the failures from before it closed do not re-open it
    assert await br.evaluate_once() == []


async def test_a_failed_probe_reopens_and_permanent_failures_do_not_count(engine):
    br = breakers(engine)
    await new_jobs(engine, 12)
    await br.evaluate_once()
    got = await claim(engine)
    await run_and_finish(
        engine, got[:6], ok=False, failure_class="PERMANENT"
    )  # bad input, not the dependency
    await run_and_finish(engine, got[6:], ok=True)
    assert await br.evaluate_once() == []
    total, failed = await run_transaction(
        engine,
        lambda c: qstore.failure_stats(
            c,
            region="local",
            namespace="default",
            queue="q",
            window_s=30,
            since=datetime(1970, 1, 1, tzinfo=UTC),
        ),
    )
    assert (total, failed) == (6, 0)
    ids = await new_jobs(engine, 6)
    await run_and_finish(engine, await claim(engine), ok=False)
    assert [t.to_state for t in await br.evaluate_once()] == ["OPEN"]
    first_open = (await state_row(engine))["opened_at"]
    await age_open(engine)
    assert [t.to_state for t in await br.evaluate_once()] == ["HALF_OPEN"]
    probes = await fenced(
        engine,
        {0: TOKEN},
        lambda fx: claim_store.claim_due(
            fx, targets=[Q], limit=1, dispatcher_id="A", breaker_state="HALF_OPEN"
        ),
    )
    await run_and_finish(engine, probes, ok=False)
    [tr] = await br.evaluate_once()
    assert (tr.from_state, tr.to_state) == ("HALF_OPEN", "OPEN")
    row = await state_row(engine)
    assert row["opened_at"] > first_open and row["opened_count"] == 2
    assert len(ids) == 6
