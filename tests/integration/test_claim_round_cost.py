"""What one claim round costs the claim loop, on a real PostgreSQL with a real claim loop.

Round trips: a round that claimed sends the region fence, the claim, and one statement holding both
the shard fences and the next-due read (storage.fencing.fence_and_read), where the fences and the
next-due read were two statements.

Compilation: a claim round compiles no SQL once its statements have run once: the claim statement (which holds
the ``queue_claims`` upsert, a PostgreSQL ``INSERT ... ON CONFLICT`` SQLAlchemy never caches by
itself) reuses its compiled form (storage.statements.pin_cache_key). Compiling it on every round
cost the claim loop 4-8 ms of CPU per round and, at a steady 200 due-now jobs/s, that much dispatch
lag. Real claim loop, real PostgreSQL; compilations counted on SQLAlchemy's compiler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy.sql import compiler
from test_claim_rounds import loop_with, owned  # type: ignore[import-not-found]  # noqa: F401  (the fixture)

from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage.engine import run_transaction
from gnomon_test_support import new_job_spec

pytestmark = pytest.mark.asyncio


async def test_a_claim_round_compiles_nothing_after_the_first(owned, monkeypatch):  # noqa: F811
    loop, relay = loop_with(owned, 0)
    compiled: list[str] = []
    real = compiler.SQLCompiler.__init__

    def counting(self, *args, **kw):
        real(self, *args, **kw)
        compiled.append(self.string[:40])

    async def one_job_round() -> int:
        spec = new_job_spec(namespace="acme", queue="honest")
        await run_transaction(owned, lambda c: jobs_store.insert_job(c, spec))
        n, _ = await loop.claim_once()
        return n

    assert await one_job_round() == 1  # the first round may compile its statements
    monkeypatch.setattr(compiler.SQLCompiler, "__init__", counting)
    assert [await one_job_round() for _ in range(3)] == [1, 1, 1]
    assert compiled == []
    assert len(relay.delivered) == 4


async def test_a_claim_round_sends_the_fences_and_the_next_due_read_in_one_statement(owned, monkeypatch):  # noqa: F811
    loop, relay = loop_with(owned, 0)
    assert await loop.claim_once() == (0, None)  # reads (and caches) the budget counts and limits
    later = datetime.now(UTC) + timedelta(seconds=3)
    for spec in (
        new_job_spec(namespace="acme", queue="honest"),
        new_job_spec(namespace="acme", queue="honest", schedule_at=later),
    ):
        await run_transaction(owned, lambda c, s=spec: jobs_store.insert_job(c, s))
    sent: list[str] = []
    real = psycopg.AsyncCursor.execute

    async def counted(cur, query, *args, **kw):
        sent.append(str(query)[:30])
        return await real(cur, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
    n, delay = await loop.claim_once()
    assert n == 1 and len(relay.delivered) == 1
    # the job due in 3 s: the next-due read still answers, from the fence's statement
    assert delay is not None and 1.0 < delay <= 3.0
    # region fence, claim, shard fences + next due (the budget and rate-limit lookups are cached)
    assert len(sent) == 3, sent
    assert sent[-1].startswith("WITH fenced_shards AS")
