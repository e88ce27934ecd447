"""The bookkeeping of the worker side of the lease protocol with one dispatcher, as a small pure object
(no gRPC, no event loop, no clock of its own): credits, what awaits an ack, what is re-sent, and what
an ack means.

A :class:`LeaseProtocol` outlives the streams of its :class:`~gnomon.sdk.session.DispatcherSession`:

* **credits** -- a new stream says hello with ``credits = max(1, concurrency - held)`` (``held`` =
  attempts of this dispatcher still queued or running here); the surplus (``owed``, at most one credit
  when ``held >= concurrency``) is withheld from the next returns, so at most ``concurrency`` credits
  are outstanding per stream. Each attempt that leaves the worker gives one credit back, except while
  draining (then the dispatcher must stop assigning).
* **acks** -- accepts, results and releases stay *pending* until the dispatcher acknowledges them.
  An ``ok = false`` ack with a final reason (:data:`FINAL_REFUSALS`, or none) settles the item too; a
  transient reason (e.g. ``DATABASE_UNAVAILABLE``) keeps it pending and asks for a re-send after
  :func:`resend_delay` (accepts at most :data:`MAX_ACCEPT_RETRIES` times).
* **resends** -- when a stream is replaced, everything still pending goes out again on the new one
  (:meth:`LeaseProtocol.resend_all`); an assignment re-delivered after its result was sent gets that
  result again (:meth:`LeaseProtocol.redelivered`).

Lease trust (a local monotonic deadline per attempt) is :class:`~gnomon.sdk.lease.LocalLease`;
:meth:`LeaseProtocol.heartbeat_ack` applies a heartbeat ack to one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .lease import LocalLease

__all__ = [
    "LeaseProtocol",
    "Ack",
    "AckReason",
    "Pending",
    "FINAL_REFUSALS",
    "MAX_ACCEPT_RETRIES",
    "MAX_HELLO_CREDITS",
    "is_final_refusal",
    "resend_delay",
]

K = TypeVar("K")  # identity of an attempt, e.g. ``(job, attempt, fencing_token)``
R = TypeVar("R")  # what is sent to accept/release an attempt (its reference)
S = TypeVar("S")  # what is sent to report a result


class AckReason(enum.StrEnum):
    """The ack ``reason`` values the worker acts on (worker_service.proto; the same text as the
    server's error reasons, docs/errors.md): each one is a final refusal. Any other reason on an
    ``ok = false`` ack (e.g. ``DATABASE_UNAVAILABLE``) is taken as transient: the item is re-sent."""

    STALE_ATTEMPT = "STALE_ATTEMPT"
    STALE_FENCING_TOKEN = "STALE_FENCING_TOKEN"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    NOT_FOUND = "NOT_FOUND"
    INVALID_FIELD = "INVALID_FIELD"
    INVALID_ITEM = "INVALID_ITEM"
    CHECKPOINT_TOO_LARGE = "CHECKPOINT_TOO_LARGE"


#: Ack ``reason`` values that are final refusals: every :class:`AckReason`.
FINAL_REFUSALS = frozenset(AckReason)
#: An accept refused for a transient reason is re-sent at most this many times.
MAX_ACCEPT_RETRIES = 5
#: Largest credit grant of one hello (the dispatcher's limit).
MAX_HELLO_CREDITS = 10000


def is_final_refusal(reason: str) -> bool:
    """True if an ``ok = false`` ack with this ``reason`` means "never" (an empty reason counts as
    final); False for transient reasons the worker retries."""
    return not reason or reason in FINAL_REFUSALS


def resend_delay(tries: int) -> float:
    """Seconds before re-sending an item refused for a transient reason the ``tries``-th time
    (1-based): 0.25 s doubling, capped at 5 s."""
    return min(5.0, 0.25 * 2.0 ** max(0, tries - 1))


class Ack(enum.Enum):
    """What an ack of an accept, result or release did to the pending item."""

    #: Nothing pending under that key (a duplicate or late ack): nothing to do.
    IGNORED = "ignored"
    #: Refused for a transient reason: still pending; re-send after the returned delay.
    RETRY = "retry"
    #: Acknowledged, or refused for good: no longer pending.
    SETTLED = "settled"


@dataclass
class Pending(Generic[K, R, S]):
    """Everything re-sent on a new stream: accepts, results and releases still unacknowledged."""

    accepts: list[R] = field(default_factory=list)
    results: list[S] = field(default_factory=list)
    releases: list[R] = field(default_factory=list)


class LeaseProtocol(Generic[K, R, S]):
    """Credits and acknowledgements of one worker's relationship with one dispatcher.

    Args:
        concurrency: the worker's handler slots (1-10000); also the most credits one stream holds.

    Keys (``K``) identify attempts; ``R`` and ``S`` are whatever the caller sends (the session uses
    ``AttemptRef`` and ``AttemptResult`` messages); this object never looks inside them.
    """

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        #: Credits granted by the last hello beyond ``concurrency - held``, withheld from returns.
        self.owed = 0
        self.accepts: dict[K, R] = {}
        self.results: dict[K, S] = {}
        self.releases: dict[K, R] = {}
        self._tries: dict[tuple[str, K], int] = {}

    # -- credits ------------------------------------------------------------------------------

    def hello(self, held: int) -> int:
        """Credits to grant in the hello of a new stream while ``held`` attempts of this dispatcher
        are still queued or running here: ``max(1, min(MAX_HELLO_CREDITS, concurrency - held))``.
        Records the surplus over ``concurrency`` as :attr:`owed`."""
        granted = max(1, min(MAX_HELLO_CREDITS, self.concurrency - held))
        self.owed = max(0, held + granted - self.concurrency)
        return granted

    def credit_back(self, draining: bool) -> int:
        """One attempt left the worker: how many credits to return now (0 or 1). None while
        ``draining``; none while paying off :attr:`owed`."""
        if draining:
            return 0
        if self.owed > 0:
            self.owed -= 1
            return 0
        return 1

    # -- outgoing -----------------------------------------------------------------------------

    def accept(self, key: K, ref: R) -> None:
        """An accept of ``key`` is being sent: pending until acknowledged."""
        self.accepts[key] = ref

    def finish(self, key: K, result: S | None) -> None:
        """The attempt ended: ``result`` is pending until acknowledged; ``None`` (nothing to
        report) forgets its accept too."""
        if result is None:
            self.accepts.pop(key, None)
        else:
            self.results[key] = result

    def release(self, key: K, ref: R) -> None:
        """An unstarted attempt is handed back: the release is pending until acknowledged."""
        self.releases[key] = ref

    def has_unacked(self) -> bool:
        """True while results or releases await their ack."""
        return bool(self.results or self.releases)

    def resend_all(self) -> Pending[K, R, S]:
        """Everything still pending, to be sent again on a new stream (the old stream's acks will
        never come)."""
        return Pending(list(self.accepts.values()), list(self.results.values()), list(self.releases.values()))

    def redelivered(self, key: K) -> S | None:
        """An assignment of ``key`` arrived again: its pending result (to send again), if it has one."""
        return self.results.get(key)

    def pending(self, kind: str, key: K) -> R | S | None:
        """The pending ``kind`` (``"accept"``, ``"result"``, ``"release"``) of ``key``, or ``None``."""
        if kind == "accept":
            return self.accepts.get(key)
        if kind == "result":
            return self.results.get(key)
        return self.releases.get(key)

    # -- acks ---------------------------------------------------------------------------------

    def _refused(self, kind: str, key: K, ok: bool, reason: str) -> float | None:
        """The re-send delay when a ``kind`` ack is a transient refusal (counting the try), else None."""
        if ok or is_final_refusal(reason):
            self._tries.pop((kind, key), None)
            return None
        tries = self._tries[(kind, key)] = self._tries.get((kind, key), 0) + 1
        return resend_delay(tries)

    def result_ack(self, key: K, ok: bool, reason: str = "") -> tuple[Ack, float]:
        """Applies a result ack: ``(Ack, resend delay in seconds)`` (the delay only with RETRY).
        SETTLED forgets the result and the attempt's accept."""
        if key not in self.results:
            return Ack.IGNORED, 0.0
        delay = self._refused("result", key, ok, reason)
        if delay is not None:
            return Ack.RETRY, delay
        self.results.pop(key, None)
        self.accepts.pop(key, None)
        return Ack.SETTLED, 0.0

    def release_ack(self, key: K, ok: bool, reason: str = "") -> tuple[Ack, float]:
        """Applies a release ack, as :meth:`result_ack`."""
        if key not in self.releases:
            return Ack.IGNORED, 0.0
        delay = self._refused("release", key, ok, reason)
        if delay is not None:
            return Ack.RETRY, delay
        self.releases.pop(key, None)
        return Ack.SETTLED, 0.0

    def accept_ack(self, key: K, ok: bool, reason: str = "", *, still_ours: bool = True) -> tuple[Ack, float]:
        """Applies an accept ack. A transient refusal is retried at most :data:`MAX_ACCEPT_RETRIES`
        times and only while the attempt is ``still_ours`` (running here, or its result pending);
        after that it settles as a refusal."""
        if key not in self.accepts:
            return Ack.IGNORED, 0.0
        if not ok and not is_final_refusal(reason):
            tries = self._tries.get(("accept", key), 0) + 1
            if tries <= MAX_ACCEPT_RETRIES and (still_ours or key in self.results):
                self._tries[("accept", key)] = tries
                return Ack.RETRY, resend_delay(tries)
        self.accepts.pop(key, None)
        self._tries.pop(("accept", key), None)
        return Ack.SETTLED, 0.0

    @staticmethod
    def checkpoint_ack(ok: bool, reason: str = "") -> bool:
        """True when a checkpoint ack settles the checkpoint in flight (ok, ``CHECKPOINT_TOO_LARGE``
        or a final refusal); False for a transient refusal (the latest checkpoint then goes out with
        the next heartbeat)."""
        return ok or reason == AckReason.CHECKPOINT_TOO_LARGE or is_final_refusal(reason)

    @staticmethod
    def heartbeat_ack(lease: LocalLease, ok: bool, reason: str = "") -> bool:
        """Applies a heartbeat ack to the attempt's ``lease`` (renewed from the heartbeat's send time
        when ``ok``). Returns True when the ack decides the attempt's fate (ok, or a final refusal:
        the caller drops it); False for a transient refusal (the local lease decides)."""
        lease.heartbeat_acked(ok)
        return ok or is_final_refusal(reason)
