"""Connected worker streams: identity, queues, credits, the attempts each holds, the outgoing queue."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from gnomon.common.domain.attempts import Claimed
from gnomon.common.errors import GnomonError
from gnomon.dispatcher.flow import ResponseQueue

Key = tuple[uuid.UUID, int]
#: Most attempts one stream remembers as adopted (owned by its worker identity, not delivered to it).
MAX_ADOPTED = 10_000


@dataclass(eq=False)
class WorkerSession:
    """One worker's lease stream. ``credits`` = attempts it can still take; ``held`` = attempts
    delivered to it and not finished; ``accepted`` = the subset it started; ``delivered_at`` = when
    each held attempt was (last) delivered, monotonic seconds; ``owner`` = the authenticated
    principal of the stream (the owner of every attempt it accepts).

    Flow control (:mod:`gnomon.dispatcher.flow`): ``out`` counts the bytes it holds; ``inflight`` =
    items submitted to the write batcher and not yet resolved; ``checking`` = ownership checks
    running for it; ``flow`` is set whenever one of them drops (the reader waits on it);
    ``adopted`` = attempts not delivered to this stream that its worker identity was found to own
    (after a reconnect), oldest first, at most :data:`MAX_ADOPTED`."""

    session_id: int
    worker_id: str
    namespace: str
    queues: frozenset[str]
    credits: int
    out: ResponseQueue = field(default_factory=ResponseQueue)
    held: dict[Key, Claimed] = field(default_factory=dict)
    accepted: set[Key] = field(default_factory=set)
    delivered_at: dict[Key, float] = field(default_factory=dict)
    closed: bool = False
    owner: str | None = None
    #: set when the stream's input was refused (e.g. a message that does not parse): the stream ends
    #: with this error's status instead of OK
    refused: GnomonError | None = None
    inflight: int = 0
    checking: int = 0
    flow: asyncio.Event = field(default_factory=asyncio.Event)
    adopted: dict[Key, None] = field(default_factory=dict)

    def knows(self, key: Key) -> bool:
        """True when attempt ``key`` was delivered to this stream or found to be its identity's."""
        return key in self.held or key in self.adopted

    def adopt(self, key: Key) -> None:
        """Records ``key`` as its worker identity's (checked by the ownership gate); forgets the
        oldest adopted one past :data:`MAX_ADOPTED`."""
        self.adopted[key] = None
        if len(self.adopted) > MAX_ADOPTED:
            del self.adopted[next(iter(self.adopted))]

    def forget(self, key: Key) -> None:
        """Forgets attempt ``key`` (its result was acknowledged)."""
        self.held.pop(key, None)
        self.adopted.pop(key, None)


def _bump(counter: Counter, key: object, d: int) -> None:
    """Adds ``d`` to ``counter[key]``, dropping the key when it reaches 0."""
    counter[key] += d
    if counter[key] <= 0:
        del counter[key]


class SessionRegistry:
    """All live sessions of this dispatcher; picks sessions with credits for a (namespace, queue).

    Keeps the counts stream admission checks (:mod:`gnomon.dispatcher.admission`) up to date with
    every :meth:`add` and :meth:`remove`, so a hello is admitted in O(queues it names), not
    O(streams): streams per namespace and per (namespace, principal), and how many streams serve each
    queue per namespace and per (namespace, principal) (their key counts are the distinct queues).

    A session whose queued responses hold ``max_queued_bytes`` or more (its worker does not read) is
    not picked and has no capacity, whatever its credits."""

    def __init__(self, max_queued_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_queued_bytes = max_queued_bytes
        #: (namespace, queue) -> moving average of its assignments' counted bytes (:meth:`note_bytes`)
        self.assignment_bytes: dict[tuple[str, str], float] = {}
        self.sessions: dict[int, WorkerSession] = {}
        self._ids = itertools.count(1)
        self._rr = itertools.count()
        self.changed = asyncio.Event()
        #: namespace -> its open streams
        self.ns_streams: Counter[str] = Counter()
        #: (namespace, principal) -> its open streams
        self.principal_streams: Counter[tuple[str, str | None]] = Counter()
        #: namespace -> queue -> streams of the namespace serving it
        self.ns_queues: dict[str, Counter[str]] = {}
        #: (namespace, principal) -> queue -> streams of that principal serving it
        self.principal_queues: dict[tuple[str, str | None], Counter[str]] = {}

    def add(
        self, worker_id: str, namespace: str, queues: list[str], credits: int, owner: str | None = None
    ) -> WorkerSession:
        """Registers a new stream of principal ``owner``."""
        s = WorkerSession(next(self._ids), worker_id, namespace, frozenset(queues), credits, owner=owner)
        self.sessions[s.session_id] = s
        self._count(s, 1)
        self.changed.set()
        return s

    def remove(self, s: WorkerSession) -> None:
        """Forgets a stream (it ended); a second call for the same stream changes nothing."""
        s.closed = True
        if self.sessions.pop(s.session_id, None) is not None:
            self._count(s, -1)

    def _count(self, s: WorkerSession, d: int) -> None:
        """Adds (``d`` = 1) or takes away (``d`` = -1) ``s`` in the admission counts; a count that
        reaches 0 is dropped, so the counters hold only namespaces, principals and queues in use."""
        who = (s.namespace, s.owner)
        _bump(self.ns_streams, s.namespace, d)
        _bump(self.principal_streams, who, d)
        ns_q = self.ns_queues.setdefault(s.namespace, Counter())
        mine_q = self.principal_queues.setdefault(who, Counter())
        for q in s.queues:
            _bump(ns_q, q, d)
            _bump(mine_q, q, d)
        if not ns_q:
            del self.ns_queues[s.namespace]
        if not mine_q:
            del self.principal_queues[who]

    def add_credits(self, s: WorkerSession, n: int, cap: int) -> int:
        """The worker can take ``n`` (> 0) more attempts, its running total clipped to ``cap``
        (the hello's credit limit): credits past it are ignored, not an error. Returns the credits
        actually added (0 .. ``n``)."""
        added = max(0, min(n, cap - s.credits))
        s.credits += added
        if added:
            self.changed.set()
        return added

    def capacity(self) -> dict[tuple[str, str], int]:
        """(namespace, queue) -> total credits of the streams that serve it (only > 0), streams at
        their queued-bytes cap left out, and each stream's credits for a queue cut to what its room
        under the cap holds of that queue's assignments (by their average size, at least one): so a
        claim takes about what the relay can deliver, not what stays in the outbox for lack of room."""
        cap: dict[tuple[str, str], int] = {}
        full, sizes = self.max_queued_bytes, self.assignment_bytes
        for s in self.sessions.values():
            if s.credits > 0 and s.out.bytes < full:
                room = full - s.out.bytes
                for q in s.queues:
                    t = (s.namespace, q)
                    avg = sizes.get(t)
                    n = s.credits if avg is None else min(s.credits, 1 + int(room // avg))
                    cap[t] = cap.get(t, 0) + n
        return cap

    def note_bytes(self, target: tuple[str, str], nbytes: int) -> None:
        """Records an assignment of ``target`` (namespace, queue) counting ``nbytes`` bytes in its
        moving average (weight 1/5; at most 10,000 targets remembered, then forgotten at once)."""
        avg = self.assignment_bytes.get(target)
        if avg is None and len(self.assignment_bytes) >= 10_000:
            self.assignment_bytes.clear()
        self.assignment_bytes[target] = nbytes if avg is None else avg + (nbytes - avg) / 5

    def targets(self) -> set[tuple[str, str]]:
        """Every (namespace, queue) some live stream serves (with or without credits)."""
        return {(s.namespace, q) for s in self.sessions.values() for q in s.queues}

    def in_flight(self) -> set[Key]:
        """Attempts delivered to a live stream and not accepted yet: still QUEUED (in the outbox),
        so the relay's recovery scan skips them (an accept moves them to RUNNING)."""
        return {k for s in self.sessions.values() for k in s.held if k not in s.accepted}

    def expire_unaccepted(self, timeout_s: float, now: float | None = None) -> list[Key]:
        """Forgets every attempt delivered to a live stream at least ``timeout_s`` seconds ago
        (``now``: monotonic seconds, default the current time) and not accepted by it: it leaves
        ``held``, so it is no longer :meth:`in_flight` and the relay's recovery scan re-delivers it
        (its attempt is still QUEUED, in the outbox). A later accept of it from that stream is no longer
        fresh, so it is refused (STALE_ATTEMPT) unless the attempt is re-delivered to that stream.

        The stream's credit is **not** given back: the worker spent it and returns it itself when the
        attempt leaves it (its accept refused, a release), so a frozen worker gets nothing more.
        Returns the forgotten ``(job_id, attempt)`` keys."""
        now = time.monotonic() if now is None else now
        gone: list[Key] = []
        for s in list(self.sessions.values()):
            for k, t in list(s.delivered_at.items()):
                if k not in s.held or k in s.accepted:
                    del s.delivered_at[k]  # accepted, finished or released: no longer timed
                elif now - t >= timeout_s:
                    del s.delivered_at[k]
                    del s.held[k]
                    gone.append(k)
        return gone

    def pick(
        self, namespace: str, queue: str, reserved: dict[WorkerSession, int] | None = None
    ) -> WorkerSession | None:
        """A session with a free credit for the queue and room under its queued-bytes cap (counting
        ``reserved`` bytes about to be queued for it), round robin, or None."""
        full = self.max_queued_bytes
        r = reserved or {}
        cands = [
            s
            for s in self.sessions.values()
            if s.credits > 0
            and s.namespace == namespace
            and queue in s.queues
            and s.out.bytes + r.get(s, 0) < full
        ]
        if not cands:
            return None
        return cands[next(self._rr) % len(cands)]
