"""The Python SDK echoes AttemptRef.job_id (the job id as 16 bytes the dispatcher sets) unchanged
in its accepts, heartbeats and results, so the dispatcher never parses the job name for them.
Against the in-process fake dispatcher."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gnomon.sdk import Worker
from gnomon_fake_dispatcher import assignment, start, stop, until

pytestmark = pytest.mark.timeout(40)


async def test_the_job_id_bytes_are_echoed_in_accepts_heartbeats_and_results(fake):
    jid = uuid.uuid4()
    a = assignment(1, lease_s=1.0)
    a.attempt.job_id = jid.bytes
    fake.add(a)
    release = asyncio.Event()

    async def handler(ctx):
        await release.wait()

    w = Worker(["q"], handler, dispatchers=[fake.address], concurrency=1)
    task = await start(w)
    await until(lambda: fake.of_kind("heartbeats"))  # running long enough for a lease renewal
    release.set()
    await until(lambda: fake.results())
    await stop(w, task)
    sent = [r for m in fake.of_kind("accepts") for r in m.attempts]
    sent += [r for m in fake.of_kind("heartbeats") for r in m.attempts]
    sent += [r.attempt for m in fake.of_kind("results") for r in m.results]
    kinds = {k for k in ("accepts", "heartbeats", "results") if fake.of_kind(k)}
    assert kinds == {"accepts", "heartbeats", "results"}
    assert sent and all(r.job_id == jid.bytes and r.job == a.attempt.job for r in sent)
