"""Local lease bookkeeping of one attempt (docs/concepts.md: trust a lease only until a local
deadline with a safety margin).

The dispatcher reports lease ends in *database* time. Comparing those with the worker's wall
clock would make correctness depend on clock skew, so the worker keeps its own deadline on the
monotonic clock instead: a lease granted or renewed in answer to a message the worker sent at
monotonic time ``t`` cannot end later than ``t + lease_duration`` (the server extends from its
own "now", which is after ``t``). The attempt counts as lost once
``now > deadline - margin``; the worker then stops reporting for it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["DEFAULT_LEASE_SECONDS", "lease_margin", "initial_lease_seconds", "LocalLease"]

#: Used when an assignment carries neither ``lease_duration`` nor ``lease_expire_time``
#: (the server default, job_service.proto).
DEFAULT_LEASE_SECONDS = 30.0

#: At most this many unacknowledged heartbeat send times are remembered per attempt.
_MAX_INFLIGHT = 16


def lease_margin(lease_seconds: float) -> float:
    """Safety margin (seconds) subtracted from a local lease deadline: ``max(1 s, lease/5)``,
    capped at ``lease/2`` so that a 1-second lease is not lost the moment it is granted.

    >>> lease_margin(30.0), lease_margin(1.0), lease_margin(3600.0)
    (6.0, 0.5, 720.0)
    """
    return min(max(1.0, lease_seconds / 5.0), lease_seconds / 2.0)


def initial_lease_seconds(
    lease_duration_s: float | None,
    lease_expire_time: datetime | None,
    wall_now: datetime | None = None,
) -> float:
    """Seconds of lease to assume for a freshly received assignment.

    ``lease_duration_s`` when the assignment carries it (the lease started at or before the
    claim, so counting it from the moment of receipt errs by the dispatch latency only), else
    ``lease_expire_time - wall_now`` (floored at 0; subject to clock skew, a fallback only), else
    :data:`DEFAULT_LEASE_SECONDS`.
    """
    if lease_duration_s is not None and lease_duration_s > 0:
        return lease_duration_s
    if lease_expire_time is not None:
        now = wall_now or datetime.now(UTC)
        return max(0.0, (lease_expire_time - now).total_seconds())
    return DEFAULT_LEASE_SECONDS


class LocalLease:
    """Monotonic-clock deadline of one attempt's lease.

    Args:
        lease_seconds: lease length (each renewal extends to ``sent + lease_seconds``).
        granted_at: monotonic time the lease is counted from (default: now).
        clock: monotonic clock (seconds), injectable for tests.

    Heartbeats: call :meth:`heartbeat_sent` when a heartbeat listing the attempt is queued, and
    :meth:`heartbeat_acked` when its ack arrives (acks come back in order); :meth:`renew_from`
    for other renewals (e.g. an accept ack carrying a lease end).
    """

    __slots__ = ("lease_seconds", "margin", "deadline", "_inflight", "_clock")

    def __init__(
        self,
        lease_seconds: float,
        granted_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.lease_seconds = float(lease_seconds)
        self.margin = lease_margin(self.lease_seconds)
        start = clock() if granted_at is None else granted_at
        self.deadline = start + self.lease_seconds
        self._inflight: collections.deque[float] = collections.deque(maxlen=_MAX_INFLIGHT)

    def renew_from(self, sent_at: float) -> None:
        """The server renewed the lease in answer to a message sent at monotonic ``sent_at``:
        the deadline becomes ``max(deadline, sent_at + lease_seconds)``."""
        self.deadline = max(self.deadline, sent_at + self.lease_seconds)

    def heartbeat_sent(self, at: float | None = None) -> None:
        """Records that a heartbeat for this attempt was queued at monotonic ``at`` (default now)."""
        self._inflight.append(self._clock() if at is None else at)

    def heartbeat_acked(self, ok: bool) -> None:
        """Consumes the oldest in-flight heartbeat; if ``ok``, renews from its send time."""
        if not self._inflight:
            return
        sent = self._inflight.popleft()
        if ok:
            self.renew_from(sent)

    def forget_inflight(self) -> None:
        """Drops in-flight heartbeat records (their stream broke; no ack will come)."""
        self._inflight.clear()

    def remaining(self, now: float | None = None) -> float:
        """Seconds until ``deadline - margin`` (negative once lost)."""
        return (self.deadline - self.margin) - (self._clock() if now is None else now)

    def lost(self, now: float | None = None) -> bool:
        """True once ``now > deadline - margin``: the lease can no longer be trusted."""
        return self.remaining(now) < 0
