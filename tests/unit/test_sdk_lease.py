"""gnomon.sdk.lease: local lease deadline on the monotonic clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gnomon.sdk.lease import DEFAULT_LEASE_SECONDS, LocalLease, initial_lease_seconds, lease_margin


class Clock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_margin():
    assert lease_margin(30.0) == 6.0
    assert lease_margin(3.0) == 1.0
    assert lease_margin(1.0) == 0.5  # capped at half the lease
    assert lease_margin(3600.0) == 720.0


def test_lost_after_deadline_minus_margin():
    clock = Clock(100.0)
    lease = LocalLease(10.0, clock=clock)  # deadline 110, margin 2
    assert lease.deadline == 110.0 and lease.margin == 2.0
    assert not lease.lost(107.9)
    assert lease.remaining(107.0) == 1.0
    assert lease.lost(108.1)


def test_heartbeat_renews_from_send_time_not_ack_time():
    clock = Clock(100.0)
    lease = LocalLease(10.0, clock=clock)
    lease.heartbeat_sent(105.0)
    lease.heartbeat_sent(106.0)
    lease.heartbeat_acked(True)  # answers the 105 heartbeat
    assert lease.deadline == 115.0
    lease.heartbeat_acked(False)  # the 106 one was refused: no renewal
    assert lease.deadline == 115.0
    lease.heartbeat_acked(True)  # nothing in flight: ignored
    assert lease.deadline == 115.0


def test_renewal_never_moves_the_deadline_back():
    lease = LocalLease(10.0, granted_at=100.0, clock=Clock())
    lease.renew_from(95.0)
    assert lease.deadline == 110.0


def test_forget_inflight_after_stream_break():
    lease = LocalLease(10.0, granted_at=100.0, clock=Clock())
    lease.heartbeat_sent(104.0)
    lease.forget_inflight()
    lease.heartbeat_acked(True)
    assert lease.deadline == 110.0


def test_initial_lease_seconds():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert initial_lease_seconds(20.0, now + timedelta(seconds=5), now) == 20.0
    assert initial_lease_seconds(None, now + timedelta(seconds=5), now) == 5.0
    assert initial_lease_seconds(None, now - timedelta(seconds=5), now) == 0.0
    assert initial_lease_seconds(0.0, None) == DEFAULT_LEASE_SECONDS
