"""Per-queue circuit breakers: CLOSED -> OPEN -> HALF_OPEN -> CLOSED (or back to OPEN).

* **CLOSED -> OPEN** when, among the queue's attempts finished in the last
  ``GNOMON_BREAKER_WINDOW_S`` (and since the breaker last changed state), there are at least
  ``GNOMON_BREAKER_MIN_RESULTS`` results and failures / results >= ``GNOMON_BREAKER_FAILURE_RATIO``
  (over the newest :data:`SAMPLE` results when there are more). A result is a success or a failure;
  a failure is FAILED or LOST and not PERMANENT (bad input says nothing about the dependency).
* **OPEN**: no dispatcher claims the queue (the claim statement itself checks the state, so a claim
  starting after the change takes nothing); due jobs wait SCHEDULED, no attempt is used.
* **OPEN -> HALF_OPEN** once ``GNOMON_BREAKER_OPEN_S`` passed since it opened (database clock).
* **HALF_OPEN**: at most ``GNOMON_BREAKER_PROBES`` attempts claimed since the change are live or
  succeeded at any time (claims lock the ``queue_state`` row, so dispatchers share the allowance).
  One probe failure -> OPEN again (a new open period); all probes succeeded -> CLOSED.

State lives in ``queue_state`` (migration 0005); every change is a compare-and-set on the row's
version, so any number of dispatchers may evaluate: the first one's change wins, the others' do
nothing. Each dispatcher evaluates the queues its connected workers serve every
``GNOMON_BREAKER_EVAL_INTERVAL_S`` and keeps the states it read for the claim path. Every
transition is logged (WARNING when opening, INFO otherwise) by the dispatcher that made it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common import metrics
from gnomon.common.config import BreakerSettings
from gnomon.common.errors import Unavailable
from gnomon.common.storage import queue_batches as qbatch
from gnomon.common.storage import queues as qstore
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.queues import CLOSED, HALF_OPEN, OPEN

log = logging.getLogger(__name__)

Target = tuple[str, str]

#: The failure ratio is taken over at most this many (the newest) results of the window (or
#: ``min_results`` if larger): enough for a ratio, and a bounded read at any throughput.
SAMPLE = 1000


@dataclass(frozen=True)
class Transition:
    """One state change made by this dispatcher."""

    namespace: str
    queue: str
    from_state: str
    to_state: str
    failure_ratio: float
    results: int


class Breakers:
    """Evaluates the breakers of the served queues and answers the claim path from its last reads."""

    def __init__(
        self, engine: AsyncEngine, settings: BreakerSettings, *, region: str, targets, on_change=None
    ):
        """``targets()`` returns the (namespace, queue) pairs to evaluate; ``on_change()`` is called
        after a transition that lets claims resume (to HALF_OPEN or CLOSED)."""
        self.engine, self.settings, self.region = engine, settings, region
        self.targets, self.on_change = targets, on_change
        self.states: dict[Target, str] = {}
        self.transitions: list[Transition] = []  # made by this process (tests, logs)
        self.evaluated = asyncio.Event()  # set after every evaluation round
        self._task: asyncio.Task | None = None

    # ---- the claim path --------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """False when ``GNOMON_BREAKER_ENABLED`` is off: claims then ignore breaker states entirely."""
        return self.settings.enabled

    def state(self, target: Target) -> str:
        """The state last read for ``target`` (CLOSED if never evaluated or disabled)."""
        if not self.settings.enabled:
            return CLOSED
        return self.states.get(target, CLOSED)

    async def probe_allowance(self, conn: AsyncConnection, target: Target) -> int:
        """In the claim's transaction: locks the queue's breaker row and returns how many probes may be
        claimed now (0 unless it is still HALF_OPEN): ``probes`` minus the attempts claimed since it
        half-opened that are live or succeeded. The row lock is held until the claim commits, so
        concurrent dispatchers never exceed the allowance together."""
        row = await qstore.get_state(
            conn, region=self.region, namespace=target[0], queue=target[1], lock=True
        )
        if row is None or row["state"] != HALF_OPEN:
            if row is not None:
                self.states[target] = row["state"]
            return 0
        ok, _failed, live = await qstore.probe_stats(
            conn, region=self.region, namespace=target[0], queue=target[1], since=row["updated_at"]
        )
        return max(0, self.settings.probes - ok - live)

    # ---- evaluation ------------------------------------------------------------------------

    async def evaluate_once(self) -> list[Transition]:
        """One round over the served queues (one transaction); returns the transitions this process
        made and refreshes :attr:`states`."""
        if not self.settings.enabled:
            return []
        targets = sorted(set(self.targets()))
        if not targets:
            return []

        async def tx(conn):
            # a few statements for all the queues (thousands of one tenant's queues must not
            # make the evaluation, which shares the claim loop's process, slow)
            s, region = self.settings, self.region
            rows = await qbatch.ensure_states(conn, region=region, targets=targets)
            closed = {t: r["updated_at"] for t, r in rows.items() if r["state"] == CLOSED}
            stats = await qbatch.failure_stats_many(
                conn, region=region, since=closed, window_s=s.window_s, cap=max(s.min_results, SAMPLE)
            )
            states, made = {}, []
            for t in targets:
                row = rows[t]
                if t in closed:
                    total, failed = stats.get(t, (0, 0))
                    ratio = failed / total if total else 0.0
                    if total < s.min_results or ratio < s.failure_ratio:
                        states[t] = CLOSED
                        continue
                    new, tr = await self._move(conn, row, OPEN, ratio, total)
                else:
                    new, tr = await self._step(conn, row)
                states[t] = (new or row)["state"]
                if tr:
                    made.append(tr)
            return states, made

        states, made = await run_transaction(self.engine, tx)
        self.states.update(states)
        for t in list(self.states):
            if t not in states:
                del self.states[t]
        for tr in made:
            if tr.to_state == HALF_OPEN:
                why = f"open for {self.settings.open_s:g} s; letting {self.settings.probes} probes through"
            elif tr.from_state == HALF_OPEN:
                why = (
                    f"{tr.results} probes succeeded"
                    if tr.to_state == CLOSED
                    else f"a probe failed; open again for {self.settings.open_s:g} s"
                )
            else:
                why = f"failure ratio {tr.failure_ratio:.2f} over {tr.results} results"
            (log.warning if tr.to_state == OPEN else log.info)(
                "circuit breaker of queue %s/%s: %s -> %s (%s)",
                tr.namespace,
                tr.queue,
                tr.from_state,
                tr.to_state,
                why,
            )
            metrics.BREAKER_TRANSITIONS.add(
                1,
                {
                    "namespace": tr.namespace,
                    "queue": tr.queue,
                    "from_state": tr.from_state,
                    "to_state": tr.to_state,
                },
            )
            for st in (OPEN, HALF_OPEN):
                metrics.BREAKER_STATE.set(
                    1 if tr.to_state == st else 0, {"namespace": tr.namespace, "queue": tr.queue, "state": st}
                )
        self.transitions += made
        if self.on_change and any(tr.to_state != OPEN for tr in made):
            self.on_change()
        self.evaluated.set()
        return made

    async def _step(self, conn, row: dict) -> tuple[dict | None, Transition | None]:
        s, ns, q = self.settings, row["namespace"], row["queue"]
        if row["state"] == CLOSED:
            total, failed = await qstore.failure_stats(
                conn,
                region=self.region,
                namespace=ns,
                queue=q,
                window_s=s.window_s,
                since=row["updated_at"],
                cap=max(s.min_results, SAMPLE),
            )
            ratio = failed / total if total else 0.0
            if total >= s.min_results and ratio >= s.failure_ratio:
                return await self._move(conn, row, OPEN, ratio, total)
        elif row["state"] == OPEN:
            return await self._move(
                conn, row, HALF_OPEN, row["failure_ratio"], row["window_results"], min_open_s=s.open_s
            )
        elif row["state"] == HALF_OPEN:
            ok, failed, _live = await qstore.probe_stats(
                conn, region=self.region, namespace=ns, queue=q, since=row["updated_at"]
            )
            if failed:
                return await self._move(conn, row, OPEN, failed / (ok + failed), ok + failed)
            if ok >= s.probes:
                return await self._move(conn, row, CLOSED, 0.0, ok)
        return None, None

    async def _move(self, conn, row, to, ratio, results, min_open_s=0.0):
        new = await qstore.transition(conn, row, to, ratio=ratio, results=results, min_open_s=min_open_s)
        if new is None:
            # not yet (OPEN period running), or another dispatcher moved it first: keep what it is now
            return await qstore.get_state(
                conn, region=self.region, namespace=row["namespace"], queue=row["queue"]
            ), None
        return new, Transition(row["namespace"], row["queue"], row["state"], to, ratio, results)

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the evaluation loop."""
        if self.settings.enabled:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops evaluating."""
        if self._task:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            try:
                await self.evaluate_once()
            except asyncio.CancelledError:
                raise
            except Unavailable as e:
                log.warning("breaker evaluation: %s", e)
            except Exception:
                log.exception("breaker evaluation failed")
            await asyncio.sleep(self.settings.eval_interval_s)
