"""The reaper's engine: repeated bounded sweeps (lost leases, deadlines, retention).

Competing reapers need no leader: every sweep takes its rows with ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import metrics, tracing
from gnomon.common.config import ReaperSettings
from gnomon.common.domain.attempts import Reaped
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.states import JobState
from gnomon.common.errors import Unavailable
from gnomon.common.names import job_name
from gnomon.common.storage import queue_counts, reaping
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.regions import served_regions

log = logging.getLogger(__name__)


def lost_spans(reaped: list[Reaped]) -> None:
    """One ``gnomon.lease_lost`` span (error status) per traced attempt the reaper declared lost, a
    child of its job's create span (docs/tracing.md); called only while tracing is on."""
    tracer = tracing.tracer()
    for r in reaped:
        if r.trace_context is None:
            continue
        span = tracer.start_span(
            "gnomon.lease_lost",
            context=tracing.context_of(r.trace_context),
            attributes={
                tracing.JOB: job_name(r.namespace, r.job_id),
                tracing.ATTEMPT: r.attempt,
                tracing.NAMESPACE: r.namespace,
                tracing.QUEUE: r.queue,
                tracing.FAILURE_CLASS: str(FailureClass.AMBIGUOUS),
                "gnomon.new_state": str(r.new_state),
            },
        )
        span.set_status(tracing.StatusCode.ERROR, r.error[:200])
        span.end()


@dataclass
class Counters:
    """Totals since start (also logged)."""

    lost_leases: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    expired: int = 0
    pruned: int = 0
    by_state: dict = field(default_factory=dict)


class Sweeper:
    """Runs the three sweeps in a loop; each sweep repeats at once while it fills a whole batch."""

    def __init__(self, engine: AsyncEngine, settings: ReaperSettings, *, region: str):
        self.engine, self.settings, self.region = engine, settings, region
        self.counters = Counters()
        self.swept = asyncio.Event()  # set after every full round (tests wait on it)

    async def sweep_once(self) -> int:
        """One round of all sweeps over every home region this reaper serves (its own, and those
        ``region_owners`` assigns to its region during a failover); returns how many rows changed."""
        served = await run_transaction(self.engine, lambda c: served_regions(c, home=self.region))
        changed = 0
        for region in sorted({self.region, *served}):
            changed += await self._sweep(region)
        self.swept.set()
        return changed

    async def _sweep(self, region: str) -> int:
        s = self.settings
        reaped = await run_transaction(
            self.engine,
            lambda c: reaping.reap_lost_leases(
                c, region=region, skew_margin_s=s.skew_margin_s, limit=s.batch
            ),
        )
        for r in reaped:
            log.info("attempt %d of job %s lost its lease -> %s", r.attempt, r.job_id, r.new_state)
            metrics.LEASES_LOST.add(1, {"outcome": r.new_state})
        if tracing.ENABLED:
            lost_spans(reaped)
        metrics.count_dead_letters(
            (r.namespace, r.queue, FailureClass.AMBIGUOUS) for r in reaped if r.new_state == JobState.DEAD
        )
        self.counters.lost_leases += len(reaped)
        self.counters.retried += sum(r.new_state == JobState.SCHEDULED for r in reaped)
        self.counters.dead += sum(r.new_state == JobState.DEAD for r in reaped)
        self.counters.cancelled += sum(r.new_state == JobState.CANCELLED for r in reaped)
        expired = await run_transaction(
            self.engine, lambda c: reaping.expire_deadlines(c, region=region, limit=s.batch)
        )
        if expired:
            log.info("%d jobs passed their deadline undispatched -> EXPIRED", len(expired))
        self.counters.expired += len(expired)
        metrics.EXPIRED_JOBS.add(len(expired))
        pruned = await run_transaction(
            self.engine,
            lambda c: reaping.prune_finished(c, region=region, retention_s=s.retention_s, limit=s.batch),
        )
        pruned += await run_transaction(
            self.engine,
            lambda c: reaping.prune_decisions(
                c, region=region, retention_s=s.decision_retention_s, limit=s.batch
            ),
        )
        self.counters.pruned += pruned
        # claim counters past the longest retry-budget window (queue_counts.KEPT_S)
        counts = await run_transaction(
            self.engine, lambda c: queue_counts.prune_counts(c, region=region, limit=s.batch)
        )
        return len(reaped) + len(expired) + pruned + counts

    async def run(self, stop: asyncio.Event) -> None:
        """Sweeps until ``stop`` is set; sleeps ``interval_s`` between rounds that changed little."""
        while not stop.is_set():
            try:
                changed = await self.sweep_once()
            except Unavailable as e:
                log.warning("reaper: %s", e)
                changed = 0
            except Exception:
                log.exception("reaper sweep failed")
                changed = 0
            if changed >= self.settings.batch:
                continue
            try:
                await asyncio.wait_for(stop.wait(), self.settings.interval_s)
            except TimeoutError:
                pass
