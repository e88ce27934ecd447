"""The per-queue retry budget (seed: "a shared retry budget scoped to the failing dependency").

Over a sliding window (``GNOMON_RETRY_BUDGET_WINDOW_S``), a (region, namespace, queue) may start at
most ``max(ratio * first attempts, min_per_s * window)`` retries (attempts numbered 2 and up). The
counts are the claims of every dispatcher in the window, counted per queue and second by the claim
statement itself (``queue_claims``, :func:`gnomon.common.storage.queue_counts.budget_counts_many`), cached here for
``GNOMON_RETRY_BUDGET_CACHE_S`` so the claim path pays one small query per queue and second; this
dispatcher's own retries since the last read are added locally.

Enforcement is in the claim (:func:`gnomon.common.storage.claims.claim_due`): each claim may take at
most :meth:`RetryBudget.caps` retries of a queue; the due retries beyond that are pushed back by
multiples of the budget's spacing (``window / allowed``), so they wait SCHEDULED without using an
attempt and without blocking the first attempts queued behind them. Approximate across dispatchers:
within one cache period each dispatcher may spend what it saw remaining, so N dispatchers can
overshoot by up to (N - 1) times that remainder for about a second.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.config import RetryBudgetSettings
from gnomon.common.retry import budget_allowed, budget_spacing_s
from gnomon.common.storage import queues as qstore

log = logging.getLogger(__name__)

Target = tuple[str, str]


@dataclass
class _Window:
    fetched: float  # time.monotonic() of the read
    first_attempts: int
    retries: int  # read from the database
    local: int = 0  # retries this dispatcher claimed since the read


@dataclass(frozen=True)
class Cap:
    """What one claim may take for a queue: at most ``retries`` retries (``None``: no limit);
    excess retries are pushed back by multiples of ``spacing_s``."""

    retries: int | None
    spacing_s: float
    allowed: int = 0
    used: int = 0


class RetryBudget:
    """Window counts per queue (cached) -> a retry cap per claim."""

    def __init__(self, settings: RetryBudgetSettings, *, region: str, clock=time.monotonic):
        self.settings, self.region, self.clock = settings, region, clock
        self._windows: dict[Target, _Window] = {}
        self.held_back = 0  # claims that hit the cap (for logs/metrics)

    async def caps(self, conn: AsyncConnection, targets: list[Target]) -> dict[Target, Cap]:
        """The cap of each target for a claim made now; reads the window counts of the targets whose
        cached counts are older than ``cache_s`` (on ``conn``, the claim's transaction), all of them
        in one statement whatever their number."""
        s = self.settings
        if not s.enabled:
            return {t: Cap(None, 1.0) for t in targets}
        now = self.clock()
        stale = [t for t in targets if (w := self._windows.get(t)) is None or now - w.fetched >= s.cache_s]
        if stale:
            counts = await qstore.budget_counts_many(
                conn, region=self.region, targets=stale, window_s=s.window_s
            )
            for t, c in counts.items():
                self._windows[t] = _Window(now, c.first_attempts, c.retries)
        out = {}
        for t in targets:
            w = self._windows[t]
            allowed = budget_allowed(
                w.first_attempts, ratio=s.ratio, window_s=s.window_s, min_per_s=s.min_per_s
            )
            used = w.retries + w.local
            out[t] = Cap(max(0, allowed - used), budget_spacing_s(allowed, s.window_s), allowed, used)
        return out

    def spent(self, target: Target, retries: int, cap: Cap | None = None) -> None:
        """Records ``retries`` retries claimed for ``target`` by this dispatcher (after commit)."""
        w = self._windows.get(target)
        if w is not None and retries:
            w.local += retries
        if cap is not None and cap.retries is not None and retries >= cap.retries:
            self.held_back += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "retry budget of %s/%s spent: %d/%d retries in the window",
                    target[0],
                    target[1],
                    cap.used + retries,
                    cap.allowed,
                )

    def forget(self, keep: set[Target]) -> None:
        """Drops cached windows of queues no longer served."""
        for t in list(self._windows):
            if t not in keep:
                del self._windows[t]
