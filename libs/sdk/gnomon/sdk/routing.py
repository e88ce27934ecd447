"""Rerouting: the running attempts and unacknowledged results of a dispatcher whose stream is down
go out through another dispatcher stream of the same worker.

An attempt is owned by the worker identity that accepted it (principal + ``worker_id``), not by the
dispatcher that delivered it: a heartbeat, checkpoint, result or re-sent accept is accepted by any
dispatcher of the region when it comes from that identity with the attempt's fencing token and
version (docs/security.md, "Attempts are owned"). So when the stream of the
:class:`~gnomon.sdk.session.DispatcherSession` holding an attempt is down (broken, closed, or its
dispatcher gone from discovery), :func:`reroute` moves the attempt, with its pending accept and
result, to a connected session; from then on that session heartbeats it, carries its checkpoints and
reports its result. A dispatcher crash therefore costs no work a healthy worker finishes.

Policy (kept simple on purpose): an attempt moves at most when its session is down, and stays with the
session it moved to; when its first dispatcher comes back it is not moved back (it moves again only
if its new session goes down too). A moved attempt's credit belongs to the stream that delivered it
(whose next hello no longer counts it as held), so finishing it returns no credit to the session
that carries it (:attr:`~gnomon.sdk.attempts.Attempt.borrowed`).

A result acknowledged by one dispatcher is settled and never sent again; a refusal
(``STALE_ATTEMPT``, ``LEASE_EXPIRED``) still drops the attempt as it does on its first stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .attempts import RUNNING
from .outgoing import RefKey

if TYPE_CHECKING:  # pragma: no cover
    from .session import DispatcherSession

__all__ = ["reroute", "move"]

log = logging.getLogger("gnomon.sdk.worker")


def _has_work(session: DispatcherSession) -> bool:
    return bool(session.protocol.results) or any(att.state == RUNNING for att in session.attempts.values())


def reroute(sessions: Iterable[DispatcherSession]) -> int:
    """Moves the running attempts and pending results of every session whose stream is down (not
    connected, not closing) to the connected session holding the fewest attempts. Called by the
    worker's ticker. Returns how many attempts and results moved (0 when no session is connected)."""
    sessions = list(sessions)
    live = [s for s in sessions if s.connected and not s.ended and not s.closing]
    if not live:
        return 0
    moved = 0
    for src in sessions:
        if src.connected or src.closing or src.ended or not _has_work(src):
            continue
        dst = min(live, key=lambda s: len(s.attempts))
        moved += move(src, dst)
    return moved


def move(src: DispatcherSession, dst: DispatcherSession) -> int:
    """Moves every running attempt of ``src`` (with its pending accept) and every pending result of
    ``src`` (with its accept) to ``dst`` and queues them on ``dst``'s stream. Queued (unstarted)
    attempts stay: they belong to the stream that delivered them. Returns the number moved."""
    moved = 0
    for key, att in list(src.attempts.items()):
        if att.state != RUNNING:
            continue
        del src.attempts[key]
        att.session = dst
        att.borrowed = True
        att.cp_inflight = None
        att.lease.forget_inflight()
        dst.attempts[key] = att
        _move_accept(src, dst, key)
        if att.lease.lease_seconds < dst._min_lease:
            dst._min_lease = att.lease.lease_seconds  # heartbeat often enough for this lease too
        moved += 1
    for key, result in list(src.protocol.results.items()):
        del src.protocol.results[key]
        src.buffer.discard(key)
        _move_accept(src, dst, key)
        dst.protocol.finish(key, result)
        dst.buffer.add_result(result)
        moved += 1
    if moved:
        log.info(
            "dispatcher %s is down: %d attempt(s)/result(s) now go through %s",
            src.address,
            moved,
            dst.address,
        )
    return moved


def _move_accept(src: DispatcherSession, dst: DispatcherSession, key: RefKey) -> None:
    """Moves the pending accept of ``key``, if any, from ``src`` to ``dst`` (re-sent there: the
    dispatcher applies a re-sent accept from the identity that accepted the attempt)."""
    ref = src.protocol.accepts.pop(key, None)
    if ref is not None:
        dst.protocol.accept(key, ref)
        dst.buffer.add_accept(ref)
