"""Helpers for the CancelJob and RescheduleJob tests (test_cancel.py, test_reschedule.py): jobs created
through the JobService stub, claimed and accepted through the dispatcher's storage calls made
directly, rows read back, and failed calls decoded. The JobService they talk to is the
``cancel_env`` fixture of conftest.py, whose engine owns all :data:`SHARDS` with :data:`TOKEN`.
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import select

from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon.common.domain.attempts import AttemptKey, Claimed
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.job_view import JOB_FROM, derived_columns
from gnomon.common.storage.schema import attempts, jobs
from gnomon_test_support import fenced

SHARDS = 8
TOKEN = 7
TOKENS = {s: TOKEN for s in range(SHARDS)}
OUT = js.CancelOutcome


def decode(err: grpc.aio.AioRpcError):
    """(ErrorInfo, BadRequest or None) of a failed call."""
    info, bad = error_details_pb2.ErrorInfo(), None
    for d in rpc_status.from_call(err).details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            d.Unpack(info)
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
    return info, bad


def job_id(job: job_pb2.Job) -> uuid.UUID:
    return uuid.UUID(job.name.rsplit("/", 1)[1])


async def create(stub, **kw) -> job_pb2.Job:
    return (await stub.CreateJob(js.CreateJobRequest(queue="q", **kw))).job


async def claim(engine, limit: int = 100) -> list[Claimed]:
    return await fenced(
        engine,
        TOKENS,
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=limit, dispatcher_id="D"),
    )


def key(c: Claimed) -> AttemptKey:
    return AttemptKey(c.job_id, c.attempt, c.version, c.token)


async def running(stub, engine, n: int) -> tuple[list[job_pb2.Job], list[AttemptKey]]:
    """``n`` jobs created, claimed and accepted by worker W (RUNNING, version 3)."""
    created = [await create(stub) for _ in range(n)]
    by_id = {c.job_id: c for c in await claim(engine)}
    keys = [key(by_id[job_id(j)]) for j in created]
    assert len(await run_transaction(engine, lambda c: lease_store.accept(c, keys, "W"))) == n
    return created, keys


async def row(engine, jid: uuid.UUID) -> dict:
    """The job row as a client sees it (state, version, started_at derived from its attempt)."""
    async with engine.connect() as c:
        q = select(*derived_columns(jobs.c)).select_from(JOB_FROM).where(jobs.c.id == jid)
        return dict((await c.execute(q)).mappings().one())


async def stored_row(engine, jid: uuid.UUID) -> dict:
    """The ``jobs`` row as stored."""
    async with engine.connect() as c:
        return dict((await c.execute(select(jobs).where(jobs.c.id == jid))).mappings().one())


async def attempt_row(engine, jid: uuid.UUID, attempt: int = 1) -> dict:
    async with engine.connect() as c:
        return dict(
            (await c.execute(select(attempts).where(attempts.c.job_id == jid, attempts.c.attempt == attempt)))
            .mappings()
            .one()
        )


async def cancel(stub, job: job_pb2.Job, expected_version: int | None = None) -> js.CancelJobResponse:
    req = js.CancelJobRequest(name=job.name)
    if expected_version is not None:
        req.expected_version = expected_version
    return await stub.CancelJob(req)


async def rpc_error(coro) -> tuple[grpc.StatusCode, str, list[str]]:
    """(code, ErrorInfo reason, BadRequest fields) of a failing call."""
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await coro
    info, bad = decode(e.value)
    assert "Traceback" not in (e.value.details() or "")
    return e.value.code(), info.reason, [v.field for v in bad.field_violations] if bad else []


def complete(engine, results):
    return run_transaction(engine, lambda c: result_store.complete(c, results, retry_delay_s=lambda r, a: 0))
