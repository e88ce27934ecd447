"""Per-queue dispatch rate limits: the token bucket in the database (explicit checks), and through
real processes with two dispatchers sharing one limit while a backlog waits SCHEDULED."""

from __future__ import annotations

import os
from datetime import timedelta

import grpc
import pytest
from sqlalchemy import text

from gnomon.common.storage import rate_limits
from gnomon.common.storage.engine import run_transaction
from gnomon.sdk import Client, GnomonError
from gnomon_test_support import records, running_suite, sql, wait_for

pytestmark = pytest.mark.integration
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def test_token_bucket_grants_burst_then_rate_and_takes_back_unused(engine):
    kw = dict(region="local", namespace="default", queue="q")
    assert await run_transaction(engine, lambda c: rate_limits.take(c, want=5, **kw)) == (
        5,
        0.0,
    )  # no limit
    lim = await run_transaction(engine, lambda c: rate_limits.set_limit(c, rate=10.0, burst=3, **kw))
    assert (lim.rate, lim.burst, lim.tokens) == (10.0, 3, 3.0)

    async def take_then(conn, want, back):
        got = await rate_limits.take(conn, want=want, **kw)
        await rate_limits.give_back(conn, n=back, **kw)
        return got

    granted, wait = await run_transaction(engine, lambda c: take_then(c, 5, 1))
    assert (granted, wait) == (3, 0.0)
    granted, wait = await run_transaction(engine, lambda c: rate_limits.take(c, want=5, **kw))
    assert granted == 1  # the one given back
    granted, wait = await run_transaction(engine, lambda c: rate_limits.take(c, want=5, **kw))
    assert granted == 0 and 0 < wait <= 0.1 + 1e-9  # next token in at most 1/rate s
    assert await run_transaction(engine, lambda c: rate_limits.set_limit(c, rate=0, burst=1, **kw)) is None
    assert await run_transaction(engine, lambda c: rate_limits.take(c, want=7, **kw)) == (7, 0.0)


async def test_a_queues_limit_is_found_among_any_number_of_others(engine):
    """The dispatcher looks limits up by the queues it claims: a flood of 25,000 limits of another
    namespace inserted first (so a scan of the table in storage order meets them first: the read
    capped at 10,000 rows with no order it replaced missed the later ones) hides nothing."""
    async with engine.begin() as c:
        await c.execute(
            text(
                "INSERT INTO queue_limits (region, namespace, queue, rate, burst, tokens, refilled_at, updated_at) "
                "SELECT 'local', 'abuse', 'flood-' || lpad(i::text, 5, '0'), 1000, 1000, 1000, now(), now() "
                "FROM generate_series(0, 24999) i"
            )
        )
    kw = dict(region="local", namespace="acme", queue="limited")
    await run_transaction(engine, lambda c: rate_limits.set_limit(c, rate=1.0, burst=1, **kw))
    async with engine.begin() as c:
        first = (await c.execute(text("SELECT namespace FROM queue_limits LIMIT 10000"))).scalars().all()
    assert "acme" not in first  # the storage order puts acme's limit past the flood
    wanted = [("acme", "limited"), ("abuse", "flood-24999"), ("acme", "none")]
    found = await run_transaction(engine, lambda c: rate_limits.limited(c, region="local", targets=wanted))
    assert found == {("acme", "limited"), ("abuse", "flood-24999")}
    granted = await run_transaction(
        engine,
        lambda c: rate_limits.take_many(
            c, region="local", wants={("acme", "limited"): 5, ("acme", "none"): 3}
        ),
    )
    assert granted[("acme", "limited")][0] == 1 and granted[("acme", "none")] == (3, 0.0)


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("rl-suite"), dispatchers=2) as s:
        yield s


def test_two_dispatchers_share_one_limit_and_the_backlog_waits(suite):
    rate, burst, n = 20.0, 5, 150
    record = os.path.join(suite.work_dir, "limited.txt")
    with Client(api=suite.api_address) as c:
        with pytest.raises(GnomonError) as e:
            c.set_queue_rate_limit("limited", -1)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "rate" in dict(e.value.field_violations)
        q = c.set_queue_rate_limit("limited", rate, burst)
        assert q.rate_limit[:2] == (rate, burst)
        names = [c.create_job("limited", b"").name for _ in range(n)]
        workers = [
            suite.start_worker(
                ["limited"],
                "gnomon_test_handlers:record",
                concurrency=64,
                env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR},
            )
            for _ in range(2)
        ]
        try:
            # while it drains, the backlog is visible and waits SCHEDULED (not in memory)
            backlog = wait_for(
                lambda: (g := c.get_queue("limited")).due_jobs >= 50 and g, 20, "a visible backlog"
            )
            assert backlog.rate_limit is not None
            wait_for(lambda: len(records(record)) >= n, 60, f"{n} executions")
        finally:
            for w in workers:
                suite.stop_proc(w)
    times = sorted(
        r[0] for r in sql(suite.database_url, "SELECT dispatched_at FROM jobs WHERE queue = 'limited'")
    )
    assert len(times) == n
    t0 = times[0]
    for k, t in enumerate(times):  # never faster than burst + rate * elapsed
        allowed = burst + rate * (t - t0).total_seconds() + 1
        assert k + 1 <= allowed, f"dispatch {k + 1} at +{(t - t0).total_seconds():.3f} s exceeds the limit"
    assert times[-1] - t0 >= timedelta(seconds=(n - burst - 1) / rate)
    dispatchers = sql(
        suite.database_url, "SELECT count(DISTINCT dispatcher_id) FROM attempts WHERE queue = 'limited'"
    )
    assert dispatchers == [(2,)]  # both dispatchers claimed, from the one bucket
    assert len(set(names)) == n
