"""The outbox relay: delivers claimed attempts to worker streams.

An attempt leaves the outbox (the QUEUED attempt rows) once a worker accepted it (the accept moves
it to RUNNING); until then it is "in flight" on a live stream (:meth:`SessionRegistry.in_flight`).
Fast path: right after a claim commits, the claimed attempts are handed to streams with credits.
Recovery path: every ``relay_interval_s`` the relay re-reads QUEUED attempts of its shards
that no live stream holds (a previous owner died between claim commit and delivery; a worker
released an attempt or disconnected before accepting; a stream did not accept an attempt within
``accept_timeout_s`` of its delivery, :meth:`SessionRegistry.expire_unaccepted`; no worker had
credits at claim time),
re-fences them under the current token (through :func:`gnomon.common.storage.fencing.run_fenced`: the
region fence, the shards' fences and the trusted lease, checked before the commit) and delivers them
again. A duplicate delivery is harmless:
the accept of the second copy is refused (the attempt is already RUNNING for another worker), and
a worker starts a handler only after its accept is acknowledged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import defaultdict
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common import tracing
from gnomon.common.domain.attempts import Claimed
from gnomon.common.errors import GnomonError, StaleFencingToken
from gnomon.common.names import job_name, schedule_name
from gnomon.common.storage import outbox as outbox_store
from gnomon.common.storage.fencing import Fence, LeaseNotTrusted, run_fenced
from gnomon.common.timeconv import to_duration, to_timestamp
from gnomon.dispatcher import tracing as dispatch_tracing
from gnomon.dispatcher.flow import KEEP_PAYLOAD_BYTES, assignment_bytes, assignment_messages
from gnomon.dispatcher.sessions import SessionRegistry, WorkerSession
from gnomon.dispatcher.shards import ShardOwnership

log = logging.getLogger(__name__)


def attempt_ref(c: Claimed) -> wpb.AttemptRef:
    """The wire reference of a claimed attempt: its job's name and id (16 bytes), attempt number,
    version and fencing token."""
    return wpb.AttemptRef(
        job=job_name(c.namespace, c.job_id),
        job_id=c.job_id.bytes,
        attempt=c.attempt,
        version=c.version,
        fencing_token=c.token,
    )


def assignment(c: Claimed) -> wpb.Assignment:
    """The wire form of a claimed attempt."""
    a = wpb.Assignment(
        attempt=attempt_ref(c),
        queue=c.queue,
        payload=c.payload,
        idempotency_key=c.idempotency_key,
        lease_expire_time=to_timestamp(c.lease_expires_at),
        schedule_time=to_timestamp(c.scheduled_at),
        max_attempts=c.max_attempts,
        lease_duration=to_duration(timedelta(milliseconds=c.lease_ms)),
    )
    if c.deadline is not None:
        a.deadline.CopyFrom(to_timestamp(c.deadline))
    if c.checkpoint:
        a.checkpoint = c.checkpoint
    if c.start_to_close_ms is not None:
        a.start_to_close.CopyFrom(to_duration(timedelta(milliseconds=c.start_to_close_ms)))
    o = c.occurrence
    if o is not None:
        a.schedule = schedule_name(c.namespace, o["schedule_id"])
        a.coalesced_count = o["coalesced_count"] or 0
        if o["nominal_time"] is not None:
            a.nominal_time.CopyFrom(to_timestamp(o["nominal_time"]))
        if o["coalesced_first"] is not None:
            a.coalesced_first_time.CopyFrom(to_timestamp(o["coalesced_first"]))
        if o["coalesced_last"] is not None:
            a.coalesced_last_time.CopyFrom(to_timestamp(o["coalesced_last"]))
    return a


class Relay:
    """Delivers :class:`Claimed` attempts to sessions and recovers undelivered QUEUED attempts (the outbox)."""

    def __init__(
        self,
        engine: AsyncEngine,
        registry: SessionRegistry,
        shards: ShardOwnership,
        *,
        region: str,
        interval_s: float,
        batch: int,
        accept_timeout_s: float = 10.0,
    ):
        self.engine, self.registry, self.shards = engine, registry, shards
        self.region, self.interval_s, self.batch = region, interval_s, batch
        #: an attempt delivered and not accepted this long (seconds) is forgotten and re-delivered
        self.accept_timeout_s = accept_timeout_s
        self.delivered = 0
        #: True when the last scan saw more unpublished rows than it could deliver (or any while no
        #: stream had credits): the claim loop then re-delivers them before claiming new work, so
        #: released and recovered attempts do not wait behind a backlog of fresh claims
        self.backlog = False
        self._task: asyncio.Task | None = None

    def deliver(self, claimed: list[Claimed]) -> int:
        """Hands attempts to sessions with credits and room under their queued-bytes cap (each
        assignment counted by :func:`assignment_bytes`; a session's messages cut at
        :data:`~gnomon.dispatcher.flow.MAX_ASSIGNMENTS_MESSAGE_BYTES`); returns how many were
        delivered. The rest stay QUEUED in the outbox for the recovery scan. A large payload is not
        kept in the session's ``held`` record once its assignment is built."""
        per_session: dict[WorkerSession, list[Claimed]] = defaultdict(list)
        sizes: dict[WorkerSession, list[int]] = defaultdict(list)
        reserved: dict[WorkerSession, int] = {}
        now = time.monotonic()
        for c in claimed:
            n = assignment_bytes(c)
            self.registry.note_bytes((c.namespace, c.queue), n)
            s = self.registry.pick(c.namespace, c.queue, reserved)
            if s is None:
                continue
            reserved[s] = reserved.get(s, 0) + n
            s.credits -= 1
            per_session[s].append(c)
            sizes[s].append(n)
        for s, items in per_session.items():
            batch = [assignment(c) for c in items]
            if tracing.ENABLED:  # the deliver spans; their contexts go in the assignments
                dispatch_tracing.delivered(items, batch, s.worker_id)
            for c in items:
                key = (c.job_id, c.attempt)
                big = len(c.payload) + len(c.checkpoint or b"") > KEEP_PAYLOAD_BYTES
                s.held[key] = dataclasses.replace(c, payload=b"", checkpoint=None) if big else c
                s.delivered_at[key] = now
            for msg, nbytes in assignment_messages(batch, sizes[s]):
                s.out.put_nowait(msg, nbytes)
            self.delivered += len(items)
        return sum(len(v) for v in per_session.values())

    def start(self) -> None:
        """Starts the recovery scan."""
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stops the recovery scan."""
        if self._task:
            self._task.cancel()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.recover_once()
            except Exception:
                log.warning("outbox recovery scan failed", exc_info=True)

    async def recover_once(self) -> int:
        """One recovery scan: first forgets attempts not accepted within ``accept_timeout_s`` of
        their delivery, then re-delivers unpublished attempts of owned shards; returns the count."""
        expired = self.registry.expire_unaccepted(self.accept_timeout_s)
        if expired:
            log.info(
                "%d attempts not accepted within %.3gs go back to the outbox",
                len(expired),
                self.accept_timeout_s,
            )
        tokens = self.shards.tokens()
        cap = sum(self.registry.capacity().values())
        region_token = self.shards.region_token
        if not tokens or region_token is None:
            self.backlog = False
            return 0
        # no credits anywhere: only look whether something waits (the claim loop serves it first
        # once credits come back)
        limit = min(cap, self.batch) if cap else 1
        try:
            rows = await run_fenced(
                self.engine,
                Fence(self.region, tokens, region_token, self.shards.trusted),
                lambda fx: outbox_store.pending_outbox(
                    fx,
                    exclude=self.registry.in_flight(),
                    limit=limit,
                    min_age_s=self.interval_s,
                ),
            )
        except LeaseNotTrusted:
            self.backlog = False
            return 0
        except StaleFencingToken as e:
            if "region" in e.metadata:
                self.shards.region_stale()
            else:
                self.shards.drop([int(s) for s in e.metadata.get("shards", "").split(",") if s])
            self.backlog = False
            return 0
        except GnomonError as e:
            log.warning("outbox scan: %s", e)
            self.backlog = False
            return 0
        if cap == 0:
            self.backlog = bool(rows)
            return 0
        # A claim may have committed and delivered while this scan ran: never deliver those twice.
        held = self.registry.in_flight()
        rows = [r for r in rows if (r.job_id, r.attempt) not in held]
        if rows:
            log.info("re-delivering %d QUEUED attempts from the outbox", len(rows))
        delivered = self.deliver(rows)
        self.backlog = len(rows) >= limit or delivered < len(rows)
        return delivered
