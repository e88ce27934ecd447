"""The pure parts of a worker stream's flow control (gnomon.dispatcher.flow, sessions, writes): the
byte count of the outgoing queue, the byte cap in picking a stream, assignment messages cut by size,
and the write batcher's fair share per principal. The end-to-end behaviour (a flood, a stream that
never reads) is in tests/integration/test_stream_isolation.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.domain.attempts import AttemptKey, Claimed
from gnomon.dispatcher.flow import (
    ACK_BYTES,
    MAX_ASSIGNMENTS_MESSAGE_BYTES,
    ResponseQueue,
    assignment_bytes,
    assignment_messages,
)
from gnomon.dispatcher.sessions import MAX_ADOPTED, SessionRegistry
from gnomon.dispatcher.writes import WriteBatcher


def claimed(payload: bytes) -> Claimed:
    now = datetime.now(UTC)
    return Claimed(
        job_id=uuid.uuid4(),
        namespace="evil",
        shard=0,
        queue="big",
        payload=payload,
        version=1,
        attempt=1,
        token=1,
        idempotency_key="k",
        scheduled_at=now,
        deadline=None,
        max_attempts=3,
        lease_ms=30_000,
        lease_expires_at=now,
        dispatched_at=now,
    )


async def test_the_response_queue_counts_the_bytes_it_holds() -> None:
    q = ResponseQueue()
    acks = wpb.LeaseResponse(acks=wpb.Acks(acks=[wpb.Ack(), wpb.Ack()]))
    q.put_nowait(acks)
    q.put_nowait(wpb.LeaseResponse(assignments=wpb.Assignments()), 300_000)
    q.put_nowait(None)
    assert q.bytes == 3 * ACK_BYTES + 300_000
    assert await q.get() is acks and q.bytes == 300_000 and q.last_bytes == 3 * ACK_BYTES
    await q.get()
    assert q.bytes == 0 and q.last_bytes == 300_000
    assert await q.get() is None and q.bytes == 0


async def test_a_stream_at_its_byte_cap_is_not_picked_and_has_no_capacity() -> None:
    reg = SessionRegistry(max_queued_bytes=1_000_000)
    deaf = reg.add("deaf", "evil", ["big"], 10_000, owner="w-evil")
    assert reg.pick("evil", "big") is deaf and reg.capacity() == {("evil", "big"): 10_000}
    assert reg.pick("evil", "big", {deaf: 1_000_000}) is None  # about to be queued counts too
    deaf.out.put_nowait(wpb.LeaseResponse(), 1_000_000)
    assert reg.pick("evil", "big") is None and reg.capacity() == {}  # credits notwithstanding
    await deaf.out.get()
    assert reg.pick("evil", "big") is deaf
    reg.note_bytes(("evil", "big"), 300_000)  # its assignments are large: claim what fits, not its credits
    assert reg.capacity() == {("evil", "big"): 1 + 1_000_000 // 300_000}
    deaf.out.put_nowait(wpb.LeaseResponse(), 900_000)
    assert reg.capacity() == {("evil", "big"): 1}  # at least one while under the cap


def test_assignments_are_cut_into_messages_by_bytes() -> None:
    big = claimed(b"x" * 300_000)
    sizes = [assignment_bytes(big)] * 7
    assert sizes[0] == 300_000 + 256
    msgs = assignment_messages([wpb.Assignment(queue=str(i)) for i in range(7)], sizes)
    assert [len(m.assignments.assignments) for m, _ in msgs] == [3, 3, 1]
    assert all(n <= MAX_ASSIGNMENTS_MESSAGE_BYTES for _, n in msgs) and sum(n for _, n in msgs) == sum(sizes)
    [(alone, n)] = assignment_messages([wpb.Assignment()], [5 * MAX_ASSIGNMENTS_MESSAGE_BYTES])
    assert len(alone.assignments.assignments) == 1 and n == 5 * MAX_ASSIGNMENTS_MESSAGE_BYTES


def test_adopted_attempts_are_bounded() -> None:
    s = SessionRegistry().add("w", "acme", ["q"], 1, owner="p")
    keys = [(uuid.uuid4(), 1) for _ in range(MAX_ADOPTED + 5)]
    for k in keys:
        s.adopt(k)
    assert len(s.adopted) == MAX_ADOPTED and not s.knows(keys[0]) and s.knows(keys[-1])
    s.forget(keys[-1])
    assert not s.knows(keys[-1])


async def test_one_principals_backlog_delays_another_by_at_most_one_batch() -> None:
    writes = WriteBatcher(None, max_batch=100)  # type: ignore[arg-type]  # not started: no commit
    key = AttemptKey(uuid.uuid4(), 1, 1, 1)
    writes.submit_group("heartbeat", [key] * 5_000, "flood", owner="evil")
    writes.submit_group("heartbeat", [key] * 10, "w1", owner="acme")
    first = writes._take()
    assert len(first) == 100
    assert sum(op.owner == "acme" for op in first) == 10  # all of acme's go in the next batch
    assert sum(op.owner == "evil" for op in first) == 90  # evil gets what acme leaves
    for _ in range(3):
        writes.submit_group("heartbeat", [key] * 80, "w1", owner="acme")
        writes.submit_group("heartbeat", [key] * 80, "w2", owner="bob")
        batch = writes._take()
        # three principals pending: an equal share each, the remainder to whoever starts the round
        shares = sorted(sum(op.owner == p for op in batch) for p in ("evil", "acme", "bob"))
        assert len(batch) == 100 and shares[0] >= 33, shares
        while any(q for p, q in writes.pending.items() if p != "evil"):  # drain acme and bob
            writes._take()
