"""Pushes cancellation requests to the workers running the cancelled attempts.

Heartbeat acks already carry ``cancel_requested``, but a worker heartbeats only every
``heartbeat_interval_s`` (5 s by default). For promptness, every ``interval_s`` (0.5 s) this loop
asks the database which of the attempts accepted on this dispatcher's live streams have a
cancellation request (:func:`gnomon.common.storage.cancel.cancel_requested_attempts`, primary-key
lookups only) and sends each one, once per stream, an unprompted
``Ack(kind=ACK_KIND_HEARTBEAT, ok=True, cancel_requested=True)`` without a lease end: the worker
sets ``ctx.cancelled`` and renews nothing. A lost push costs latency only (the next heartbeat ack
says it again).
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage.engine import run_transaction
from gnomon.dispatcher.hello import clip
from gnomon.dispatcher.relay import attempt_ref
from gnomon.dispatcher.sessions import Key, SessionRegistry, WorkerSession

log = logging.getLogger(__name__)


class CancelPusher:
    """The periodic push (see the module docstring). ``pushed`` remembers, per session id, the
    attempts already told, and forgets them when they leave the session."""

    def __init__(self, engine: AsyncEngine, registry: SessionRegistry, *, interval_s: float = 0.5):
        self.engine, self.registry, self.interval_s = engine, registry, interval_s
        self.pushed: dict[int, set[Key]] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the loop as a task on the running event loop."""
        self._task = asyncio.create_task(self._run(), name="gnomon-cancel-push")

    async def stop(self) -> None:
        """Stops the loop."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("cancellation push failed; retrying in %.3g s", self.interval_s, exc_info=True)
            await asyncio.sleep(self.interval_s)

    async def tick(self) -> int:
        """One pass: looks up the not-yet-told accepted attempts of the live sessions and pushes
        to each session the ones with a cancellation request. Returns how many acks were sent."""
        sessions = list(self.registry.sessions.values())
        live = {s.session_id for s in sessions}
        for sid in [sid for sid in self.pushed if sid not in live]:
            del self.pushed[sid]
        wanted: dict[Key, list[WorkerSession]] = {}
        for s in sessions:
            told = self.pushed.setdefault(s.session_id, set())
            told.intersection_update(s.accepted)
            for k in s.accepted:
                if k not in told and k in s.held:
                    wanted.setdefault(k, []).append(s)
        if not wanted:
            return 0
        found = await run_transaction(
            self.engine, lambda c: cancel_store.cancel_requested_attempts(c, list(wanted))
        )
        acks: dict[int, list[wpb.Ack]] = {}
        by_id: dict[int, WorkerSession] = {}
        for k in found:
            for s in wanted[k]:
                c = s.held.get(k)
                if s.closed or c is None:
                    continue
                ref = attempt_ref(c)
                acks.setdefault(s.session_id, []).append(
                    wpb.Ack(attempt=ref, kind=wpb.ACK_KIND_HEARTBEAT, ok=True, cancel_requested=True)
                )
                by_id[s.session_id] = s
                self.pushed[s.session_id].add(k)
        for sid, items in acks.items():
            s = by_id[sid]
            log.info("pushing cancellation of %d attempt(s) to worker %s", len(items), clip(s.worker_id, 128))
            s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=items)))
        return sum(len(v) for v in acks.values())
