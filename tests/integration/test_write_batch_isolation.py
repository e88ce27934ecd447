"""The dispatcher's WriteBatcher isolates a bad item (gnomon.dispatcher.writes): against the real
database, a batch holding one result PostgreSQL refuses (a NUL in its error text) commits every
honest item and refuses only the bad one with ``INVALID_ITEM``; a lost database still fails the
whole batch with UNAVAILABLE (retried by the worker), as before.
"""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

import gnomon_cancel_support as cs
from gnomon.common.domain.attempts import Result
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import Unavailable
from gnomon.devservers import free_port
from gnomon.dispatcher.writes import InvalidItem, WriteBatcher

pytestmark = pytest.mark.asyncio


async def test_one_poisoned_result_is_refused_alone_and_the_honest_ones_commit(cancel_env):
    stub, engine, _ = cancel_env
    created, keys = await cs.running(stub, engine, 7)
    writes = WriteBatcher(engine, max_batch=500, flushers=1)  # not started: flush_now drives it
    honest = [Result(key=k, succeeded=True) for k in keys[:3]] + [
        Result(key=k, succeeded=False, failure_class=FailureClass.PERMANENT, error="boom") for k in keys[3:6]
    ]
    poisoned = Result(key=keys[6], succeeded=False, failure_class=FailureClass.PERMANENT, error="bad\x00text")
    futs = [writes.submit("result", r) for r in honest[:3]]
    bad = writes.submit("result", poisoned)
    futs += [writes.submit("result", r) for r in honest[3:]]
    heartbeat = writes.submit("heartbeat", keys[0])
    await writes.flush_now()

    assert [f.result() for f in futs if f is not None] == [""] * 6
    assert heartbeat is not None and heartbeat.done()
    assert bad is not None
    err = bad.exception()
    assert isinstance(err, InvalidItem) and err.reason == ErrorReason.INVALID_ITEM
    for j in created[:3]:
        assert (await cs.row(engine, cs.job_id(j)))["state"] == "SUCCEEDED"
    for j in created[3:6]:
        assert (await cs.row(engine, cs.job_id(j)))["state"] == "DEAD"
    # nothing of the refused result was written: its attempt is still running
    assert (await cs.row(engine, cs.job_id(created[6])))["state"] == "RUNNING"
    assert (await cs.attempt_row(engine, cs.job_id(created[6])))["state"] == "RUNNING"


async def test_a_poisoned_item_alone_in_its_batch_is_refused(cancel_env):
    stub, engine, _ = cancel_env
    created, keys = await cs.running(stub, engine, 1)
    writes = WriteBatcher(engine)
    bad = writes.submit("result", Result(key=keys[0], succeeded=False, error="\x00"))
    await writes.flush_now()
    assert bad is not None and isinstance(bad.exception(), InvalidItem)
    assert (await cs.row(engine, cs.job_id(created[0])))["state"] == "RUNNING"


async def test_a_lost_database_still_fails_the_whole_batch_as_unavailable(cancel_env):
    stub, engine, _ = cancel_env
    _, keys = await cs.running(stub, engine, 2)
    gone = create_async_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none", connect_args={"connect_timeout": 2}
    )
    try:
        writes = WriteBatcher(gone)
        futs = [writes.submit("result", Result(key=k, succeeded=True)) for k in keys]
        futs.append(writes.submit("result", Result(key=keys[0], succeeded=False, error="\x00")))
        with pytest.raises(Unavailable):
            await writes.flush_now()
        assert all(f is not None and isinstance(f.exception(), Unavailable) for f in futs)
    finally:
        await gone.dispose()


async def test_the_refusal_is_logged_escaped_without_the_bound_values(cancel_env, caplog):
    stub, engine, _ = cancel_env
    _, keys = await cs.running(stub, engine, 2)
    writes = WriteBatcher(engine)
    honest = writes.submit("heartbeat", keys[0])
    bad = writes.submit("accept", keys[1], worker_id="w\nFORGED line\x00" + "x" * 500)
    with caplog.at_level(logging.INFO, logger="gnomon.dispatcher.writes"):
        await writes.flush_now()
    assert honest is not None and honest.result() is not None
    assert bad is not None and isinstance(bad.exception(), InvalidItem)
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1
    assert "\n" not in lines[0] and "\\nFORGED" in lines[0] and "x" * 100 not in lines[0]


async def test_database_errors_do_not_carry_the_bound_values(engine):
    # refused before it is sent (NUL in text): the message would list the bound values, hidden here
    secret = "client-text-\n-not-for-logs\x00"
    with pytest.raises(DBAPIError) as e:
        async with engine.connect() as c:
            await c.execute(text("SELECT CAST(:v AS text), CAST(:w AS text)"), {"v": secret, "w": "ok"})
    assert "NUL" in str(e.value) and "client-text" not in str(e.value)
