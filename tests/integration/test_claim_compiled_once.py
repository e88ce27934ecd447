"""A claim round compiles no SQL once its statements have run once: the claim statement (which holds
the ``queue_claims`` upsert, a PostgreSQL ``INSERT ... ON CONFLICT`` SQLAlchemy never caches by
itself) reuses its compiled form (storage.statements.pin_cache_key). Compiling it on every round
cost the claim loop 4-8 ms of CPU per round and, at a steady 200 due-now jobs/s, that much dispatch
lag. Real claim loop, real PostgreSQL; compilations counted on SQLAlchemy's compiler."""

from __future__ import annotations

import pytest
from sqlalchemy.sql import compiler
from test_claim_rounds import loop_with, owned  # noqa: F401  (the fixture)

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
