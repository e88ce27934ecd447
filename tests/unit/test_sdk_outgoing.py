"""gnomon.sdk.outgoing: per-stream coalescing of outgoing protocol items."""

from __future__ import annotations

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk.outgoing import OutgoingBuffer, ref_key


def ref(i: int, token: int = 7) -> wpb.AttemptRef:
    return wpb.AttemptRef(job=f"namespaces/default/jobs/{i:08d}", attempt=1, version=2, fencing_token=token)


def result(i: int) -> wpb.AttemptResult:
    return wpb.AttemptResult(attempt=ref(i), outcome=wpb.OUTCOME_SUCCEEDED)


def kinds(msgs):
    return [m.WhichOneof("kind") for m in msgs]


def test_n_accepts_become_one_message_and_wake_once_per_add():
    wakes = []
    buf = OutgoingBuffer(lambda: wakes.append(1))
    for i in range(250):
        buf.add_accept(ref(i))
    assert len(wakes) == 250 and len(buf) == 250
    msgs = buf.take()
    assert kinds(msgs) == ["accepts"]
    assert [r.job for r in msgs[0].accepts.attempts] == [ref(i).job for i in range(250)]
    assert msgs[0].accepts.attempts[0] == ref(0)  # echoed unchanged
    assert buf.take() == [] and not buf


def test_everything_pending_goes_out_in_protocol_order():
    buf = OutgoingBuffer()
    buf.add_credits(2)
    buf.add_release(ref(9))
    buf.add_result(result(1))
    buf.set_heartbeats([ref(3), ref(4)])
    buf.add_accept(ref(1))
    buf.add_credits(3)
    msgs = buf.take()
    assert kinds(msgs) == ["accepts", "heartbeats", "results", "releases", "credits"]
    assert msgs[-1].credits.credits == 5
    assert [r.job for r in msgs[1].heartbeats.attempts] == [ref(3).job, ref(4).job]
    assert msgs[2].results.results[0].outcome == wpb.OUTCOME_SUCCEEDED


def test_duplicates_are_coalesced_and_a_later_result_replaces_an_earlier_one():
    buf = OutgoingBuffer()
    buf.add_accept(ref(1))
    buf.add_accept(ref(1))
    buf.add_result(wpb.AttemptResult(attempt=ref(1), outcome=wpb.OUTCOME_FAILED, error="first"))
    buf.add_result(wpb.AttemptResult(attempt=ref(1), outcome=wpb.OUTCOME_FAILED, error="second"))
    msgs = buf.take()
    assert len(msgs[0].accepts.attempts) == 1
    assert [r.error for r in msgs[1].results.results] == ["second"]


def test_same_job_under_another_token_is_a_different_attempt():
    buf = OutgoingBuffer()
    buf.add_accept(ref(1, token=7))
    buf.add_accept(ref(1, token=8))
    assert len(buf.take()[0].accepts.attempts) == 2
    assert ref_key(ref(1, 7)) == ("namespaces/default/jobs/00000001", 1, 7)


def test_heartbeats_are_replaced_not_accumulated():
    buf = OutgoingBuffer()
    buf.set_heartbeats([ref(1)])
    assert buf.heartbeat_pending
    buf.set_heartbeats([ref(2), ref(3)])
    msgs = buf.take()
    assert [r.job for r in msgs[0].heartbeats.attempts] == [ref(2).job, ref(3).job]
    assert not buf.heartbeat_pending
    buf.set_heartbeats([])
    assert buf.take() == []


def test_large_batches_are_split_by_caps():
    buf = OutgoingBuffer(max_refs=100, max_results=40)
    for i in range(250):
        buf.add_accept(ref(i))
        buf.add_result(result(i))
    msgs = buf.take()
    assert kinds(msgs) == ["accepts"] * 3 + ["results"] * 7
    assert [len(m.accepts.attempts) for m in msgs[:3]] == [100, 100, 50]
    assert sum(len(m.results.results) for m in msgs[3:]) == 250


def test_credits_are_split_into_valid_grants():
    buf = OutgoingBuffer()
    buf.add_credits(0)
    buf.add_credits(-3)
    assert buf.credits == 0 and not buf
    buf.add_credits(25000)
    assert [m.credits.credits for m in buf.take()] == [10000, 10000, 5000]


def test_discard_and_clear():
    buf = OutgoingBuffer()
    buf.add_accept(ref(1))
    buf.add_result(result(1))
    buf.add_release(ref(2))
    buf.discard(ref_key(ref(1)))
    assert kinds(buf.take()) == ["releases"]
    buf.add_accept(ref(3))
    buf.add_credits(4)
    buf.clear()
    assert buf.take() == [] and len(buf) == 0
