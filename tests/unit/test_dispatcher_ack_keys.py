"""Acks of accepts and results are built from the key the stream's edge computed for each attempt
reference: each reference is parsed once per message, not again when its ack is built."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.domain.attempts import Claimed
from gnomon.dispatcher import acks as acks_mod
from gnomon.dispatcher import hello as hello_mod
from gnomon.dispatcher import servicer as servicer_mod
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry, WorkerSession


class _Writes:
    """Stands for the write batcher: every item's outcome is ``outcome``."""

    engine = None  # no ownership check runs: every reference is held by the stream

    def __init__(self, outcome):
        self.outcome = outcome

    def submit_group(self, _kind, items, *_a, **_kw):
        f = asyncio.get_running_loop().create_future()
        f.set_result([self.outcome] * len(items))
        return f


def _claimed(job_id: uuid.UUID, now: datetime) -> Claimed:
    fields: dict[str, Any] = {f: None for f in Claimed.__dataclass_fields__}
    fields.update(
        job_id=job_id,
        namespace="default",
        queue="q",
        attempt=1,
        version=1,
        token=7,
        dispatched_at=now,
        scheduled_at=now,
        lease_ms=30_000,
        payload=b"",
    )
    return Claimed(**fields)


@pytest.mark.parametrize("kind", ["accept", "result"])
async def test_each_reference_is_parsed_once(kind, monkeypatch) -> None:
    calls = []
    real = hello_mod.attempt_key

    def counting(ref):
        calls.append(ref.attempt)
        return real(ref)

    monkeypatch.setattr(servicer_mod, "attempt_key", counting)
    monkeypatch.setattr(acks_mod, "attempt_key", counting)
    now = datetime.now(UTC)
    outcome = now + timedelta(seconds=30) if kind == "accept" else ""
    servicer = WorkerServicer(
        SessionRegistry(),
        _Writes(outcome),  # type: ignore[arg-type]
        dispatcher_id="d",
        region="local",
        heartbeat_interval_s=1.0,
        on_credits=lambda: None,
    )
    s = WorkerSession(session_id=1, worker_id="w", namespace="default", queues=frozenset({"q"}), credits=3)
    refs = []
    for _ in range(3):
        jid = uuid.uuid4()
        s.held[(jid, 1)] = _claimed(jid, now)
        refs.append(
            wpb.AttemptRef(
                job=f"namespaces/default/jobs/{jid}", job_id=jid.bytes, attempt=1, version=1, fencing_token=7
            )
        )
    if kind == "accept":
        servicer._accepts(s, refs)
    else:
        servicer._results(s, [wpb.AttemptResult(attempt=r, outcome=wpb.OUTCOME_SUCCEEDED) for r in refs])
    msg = await asyncio.wait_for(s.out.get(), 5)
    assert [(a.ok, a.attempt.job_id) for a in msg.acks.acks] == [(True, r.job_id) for r in refs]
    assert len(calls) == len(refs)  # once at the edge; the acks reuse those keys
