"""The worker side of the lease protocol as a pure object (gnomon.sdk.protocol.LeaseProtocol) and the
local lease deadline it applies heartbeat acks to (gnomon.sdk.lease.LocalLease): credit accounting,
acks, re-sends across reconnects, lease trust. No gRPC, no event loop, a fake clock."""

from __future__ import annotations

import pytest

from gnomon.sdk.lease import LocalLease
from gnomon.sdk.protocol import (
    MAX_ACCEPT_RETRIES,
    MAX_HELLO_CREDITS,
    Ack,
    LeaseProtocol,
    is_final_refusal,
    resend_delay,
)

KEY = ("namespaces/default/jobs/j1", 1, 7)


def proto(concurrency: int = 4) -> LeaseProtocol[tuple[str, int, int], str, str]:
    return LeaseProtocol(concurrency)


def test_hello_grants_the_free_slots_and_withholds_the_surplus_from_returns():
    p = proto(4)
    assert p.hello(held=0) == 4 and p.owed == 0
    assert p.credit_back(draining=False) == 1
    # all four slots still held by attempts of the previous stream: at least one credit, owed back
    assert p.hello(held=4) == 1 and p.owed == 1
    assert p.credit_back(draining=False) == 0  # pays off the surplus
    assert p.owed == 0
    assert p.credit_back(draining=False) == 1
    assert p.hello(held=2) == 2 and p.owed == 0
    assert p.hello(held=9) == 1 and p.owed == 6  # more held than slots (several dispatchers)


def test_no_credit_returns_while_draining_and_hello_is_capped():
    p = proto(4)
    p.hello(held=4)
    assert p.credit_back(draining=True) == 0 and p.owed == 1  # the surplus is not paid off either
    assert proto(50_000).hello(held=0) == MAX_HELLO_CREDITS


def test_a_result_is_resent_after_each_reconnect_until_acknowledged():
    p = proto()
    p.accept(KEY, "ref")
    p.finish(KEY, "result")
    assert p.has_unacked()
    first = p.resend_all()  # the stream broke before the ack
    assert (first.accepts, first.results, first.releases) == (["ref"], ["result"], [])
    assert p.result_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE") == (Ack.RETRY, 0.25)
    assert p.result_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE") == (Ack.RETRY, 0.5)
    assert p.pending("result", KEY) == "result" and p.redelivered(KEY) == "result"
    assert p.resend_all().results == ["result"]  # another reconnect: still re-sent
    assert p.result_ack(KEY, ok=True) == (Ack.SETTLED, 0.0)
    assert not p.has_unacked() and p.pending("result", KEY) is None and p.pending("accept", KEY) is None
    again = p.resend_all()
    assert (again.accepts, again.results, again.releases) == ([], [], [])
    assert p.result_ack(KEY, ok=True) == (Ack.IGNORED, 0.0)  # a duplicate ack changes nothing


def test_a_final_refusal_settles_a_result_and_a_release():
    p = proto()
    p.finish(KEY, "result")
    assert p.result_ack(KEY, ok=False, reason="STALE_FENCING_TOKEN") == (Ack.SETTLED, 0.0)
    p.release(KEY, "ref")
    assert p.has_unacked() and p.resend_all().releases == ["ref"]
    assert p.release_ack(KEY, ok=False, reason="SHARD_MOVING")[0] is Ack.RETRY
    assert p.release_ack(KEY, ok=False, reason="") == (Ack.SETTLED, 0.0)  # no reason: final
    assert not p.has_unacked()


def test_nothing_to_report_forgets_the_accept():
    p = proto()
    p.accept(KEY, "ref")
    p.finish(KEY, None)
    assert p.resend_all().accepts == [] and not p.has_unacked()


def test_a_transiently_refused_accept_is_retried_a_bounded_number_of_times_while_ours():
    p = proto()
    p.accept(KEY, "ref")
    delays = [p.accept_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE") for _ in range(MAX_ACCEPT_RETRIES)]
    assert [d for _, d in delays] == [0.25, 0.5, 1.0, 2.0, 4.0] and {a for a, _ in delays} == {Ack.RETRY}
    assert p.accept_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE") == (Ack.SETTLED, 0.0)
    assert p.accept_ack(KEY, ok=True) == (Ack.IGNORED, 0.0)
    p.accept(KEY, "ref")  # an attempt that is no longer running here is not retried
    assert p.accept_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE", still_ours=False) == (Ack.SETTLED, 0.0)
    p.accept(KEY, "ref")  # ... unless its result still waits for an ack
    p.finish(KEY, "result")
    assert p.accept_ack(KEY, ok=False, reason="DATABASE_UNAVAILABLE", still_ours=False)[0] is Ack.RETRY


def test_a_lease_is_trusted_only_until_its_local_deadline_minus_the_margin():
    now = [0.0]
    lease = LocalLease(10.0, granted_at=0.0, clock=lambda: now[0])  # deadline 10 s, margin 2 s
    assert not lease.lost(7.9) and lease.lost(8.1)
    lease.heartbeat_sent(5.0)
    assert LeaseProtocol.heartbeat_ack(lease, ok=True)  # renewed from the send time: deadline 15 s
    assert not lease.lost(12.9) and lease.lost(13.1)
    lease.heartbeat_sent(12.0)
    assert not LeaseProtocol.heartbeat_ack(lease, ok=False, reason="DATABASE_UNAVAILABLE")
    now[0] = 13.1
    assert lease.lost() and lease.remaining() == pytest.approx(-0.1)  # not renewed: no longer trusted
    lease.heartbeat_sent(13.0)
    assert LeaseProtocol.heartbeat_ack(lease, ok=False, reason="LEASE_EXPIRED")  # final: caller drops it


def test_checkpoint_acks_and_refusal_reasons():
    assert LeaseProtocol.checkpoint_ack(True)
    assert LeaseProtocol.checkpoint_ack(False, "CHECKPOINT_TOO_LARGE")
    assert LeaseProtocol.checkpoint_ack(False, "STALE_ATTEMPT")
    assert not LeaseProtocol.checkpoint_ack(False, "DATABASE_UNAVAILABLE")
    assert is_final_refusal("") and is_final_refusal("NOT_FOUND") and not is_final_refusal("UNAVAILABLE")
    assert [resend_delay(n) for n in (1, 2, 3, 6, 10)] == [0.25, 0.5, 1.0, 5.0, 5.0]
