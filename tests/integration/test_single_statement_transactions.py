"""``run_transaction(..., single_statement=True)``: a statement run through ``storage.raw`` on a pooled
connection outside any transaction is its own autocommit transaction (one round trip, used by
CreateJob's insert), and the pooled connection goes back to the pool in transaction mode, so the next
multi-statement transaction on it is still all or nothing.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from gnomon.common.config import DatabaseSettings
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage.engine import make_engine, run_transaction
from gnomon.common.storage.schema import jobs
from gnomon_test_support import new_job_spec

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def one_connection(db_url):
    """An engine whose pool holds exactly one connection, so every transaction reuses it."""
    eng = make_engine(DatabaseSettings(url=db_url), pool_size=1)
    eng.pool._max_overflow = 0
    yield eng
    await eng.dispose()


async def count(engine) -> int:
    return await run_transaction(engine, lambda c: _scalar(c, select(func.count()).select_from(jobs)))


async def _scalar(conn, stmt):
    return (await conn.execute(stmt)).scalar_one()


async def assert_still_transactional(engine, *, existing) -> None:
    """A two-statement transaction whose second insert reuses the job id ``existing`` fails, and its
    first insert is rolled back with it (it would stay on a connection left in autocommit)."""
    before = await count(engine)
    first, duplicate = new_job_spec(), new_job_spec(id=existing)

    async def two(conn):
        await jobs_store.insert_job(conn, first)
        await jobs_store.insert_job(conn, duplicate)

    with pytest.raises(IntegrityError):
        await run_transaction(engine, two)
    assert await count(engine) == before


async def test_a_single_statement_commits_on_its_own_and_leaves_the_connection_transactional(one_connection):
    new = new_job_spec()
    assert jobs_store.inserts_in_one_statement(new)
    row, created = await run_transaction(
        one_connection, lambda c: jobs_store.insert_job(c, new), single_statement=True
    )
    assert created and row["id"] == new.id and row["state"] == "SCHEDULED"
    assert await count(one_connection) == 1  # committed: another transaction sees it

    # the same pooled connection, now in a two-statement transaction that fails at its second
    # statement: the first must roll back too (it would stay if the connection were left in autocommit)
    await assert_still_transactional(one_connection, existing=new.id)


async def test_a_failing_single_statement_writes_nothing_and_the_connection_stays_usable(one_connection):
    new = new_job_spec()
    await run_transaction(one_connection, lambda c: jobs_store.insert_job(c, new), single_statement=True)
    with pytest.raises(IntegrityError):
        await run_transaction(one_connection, lambda c: jobs_store.insert_job(c, new), single_statement=True)
    other = new_job_spec()
    await run_transaction(one_connection, lambda c: jobs_store.insert_job(c, other), single_statement=True)
    assert await count(one_connection) == 2

    # nor was the connection left in autocommit by the failure
    await assert_still_transactional(one_connection, existing=new.id)


async def test_a_single_statement_after_a_sqlalchemy_one_commits_with_it(one_connection):
    """``single_statement`` with a function that runs a SQLAlchemy statement first: the raw statement
    joins that transaction and both commit (nothing is silently rolled back at close)."""
    new = new_job_spec()

    async def read_then_insert(conn):
        before = await _scalar(conn, select(func.count()).select_from(jobs))
        return before, await jobs_store.insert_job(conn, new)

    before, (row, created) = await run_transaction(one_connection, read_then_insert, single_statement=True)
    assert before == 0 and created and row["id"] == new.id
    assert await count(one_connection) == 1


async def test_a_lost_connection_is_invalidated_and_the_next_transaction_gets_a_fresh_one(
    one_connection, caplog
):
    """The database ends the pooled connection's session (as a restart does): the raw statement fails
    as UNAVAILABLE, saying the write's fate is unknown, and the next transaction works on a new
    connection instead of failing on the dead one."""
    from sqlalchemy import text

    from gnomon.common.errors import Unavailable

    pid = await run_transaction(one_connection, lambda c: _scalar(c, text("SELECT pg_backend_pid()")))
    killer = make_engine(DatabaseSettings(url=str(one_connection.url)), pool_size=1)
    try:
        await run_transaction(killer, lambda c: c.execute(text(f"SELECT pg_terminate_backend({pid})")))
    finally:
        await killer.dispose()
    with (
        caplog.at_level("ERROR", logger="sqlalchemy.pool"),
        pytest.raises(Unavailable, match="may or may not have been committed"),
    ):
        await run_transaction(
            one_connection, lambda c: jobs_store.insert_job(c, new_job_spec()), single_statement=True
        )
    # invalidated as lost, not found broken by the pool's reset on check-in ("Exception during
    # reset or similar", logged at ERROR with a traceback for every dead connection)
    assert not [r for r in caplog.records if r.name.startswith("sqlalchemy.pool")]
    new = new_job_spec()
    await run_transaction(one_connection, lambda c: jobs_store.insert_job(c, new), single_statement=True)
    assert await run_transaction(one_connection, lambda c: _scalar(c, text("SELECT pg_backend_pid()"))) != pid
    assert await count(one_connection) == 1


async def test_a_batch_returns_its_rows_in_request_order_across_pages_and_kinds(one_connection):
    """``insert_jobs``: plain jobs go in one INSERT over unnested arrays (its RETURNING order is not
    promised, so rows are matched by id), jobs with a request id one by one; the rows come back in
    request order, each with its own computed ``scheduled_at``."""
    import uuid
    from datetime import UTC, datetime, timedelta

    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    batch = [
        new_job_spec(delay=timedelta(seconds=i % 7), payload=str(i).encode())
        if i % 500
        else new_job_spec(request_id=uuid.uuid4(), request_hash=f"h{i}", payload=str(i).encode())
        for i in range(2_100)
    ]
    batch[1234] = new_job_spec(schedule_at=at, payload=b"1234")
    rows = await run_transaction(one_connection, lambda c: jobs_store.insert_jobs(c, batch))
    assert [r["id"] for r in rows] == [j.id for j in batch]
    assert [r["payload"] for r in rows] == [j.payload for j in batch]
    assert rows[1234]["scheduled_at"] == at
    # now() + delay: the same transaction, so equal delays give equal instants, ordered by delay
    base = rows[7]["scheduled_at"]  # delay 0
    assert all(
        r["scheduled_at"] - base == timedelta(seconds=i % 7)
        for i, r in enumerate(rows)
        if i % 500 and i != 1234
    )
    assert await count(one_connection) == 2_100


async def test_get_job_reads_alone_and_refuses_a_missing_job(one_connection):
    """GetJob's read runs alone too: the row of an existing job, NOT_FOUND for another namespace's or
    a missing one, and the connection is still transactional afterwards."""
    from gnomon.common.errors import NotFound

    new = new_job_spec()
    await run_transaction(one_connection, lambda c: jobs_store.insert_job(c, new), single_statement=True)
    row = await run_transaction(
        one_connection, lambda c: jobs_store.get_job(c, "default", new.id), single_statement=True
    )
    assert row["id"] == new.id and row["namespace"] == "default" and row["state"] == "SCHEDULED"
    for namespace, job_id in (("other", new.id), ("default", new_job_spec().id)):
        with pytest.raises(NotFound):
            await run_transaction(
                one_connection,
                lambda c, n=namespace, j=job_id: jobs_store.get_job(c, n, j),
                single_statement=True,
            )
    await assert_still_transactional(one_connection, existing=new.id)
