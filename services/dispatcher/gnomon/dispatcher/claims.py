"""The claim loop: turns due SCHEDULED jobs of owned shards into QUEUED attempts (each QUEUED attempt
row is the outbox record the relay delivers; :mod:`gnomon.common.storage.outbox`).

Timing: after each claim the loop asks the database how long until the next due job of its shards
(within ``prefetch_s``) and arms a timer for exactly that, so a job due in 20 ms is claimed ~20 ms
later, not at the next poll. Hints (``WakeDispatcher``), new credits and newly acquired shards wake
it early. Never early: the claim's ``scheduled_at <= now()`` uses the database clock, so a timer
that fires early only finds nothing due yet.

Per queue, two brakes against retry storms: the circuit breaker (:mod:`gnomon.dispatcher.breaker`;
an OPEN queue is skipped, a HALF_OPEN one gets only its probes) and the retry budget
(:mod:`gnomon.dispatcher.budget`; a claim takes at most the retries the budget has left, the
excess is pushed back). Neither uses up an attempt: held-back jobs stay SCHEDULED.

Backpressure: a queue with a dispatch rate limit (:mod:`gnomon.dispatcher.rate_limits`) is claimed
for at most the tokens its shared bucket grants; unused tokens go back in the same transaction, and
an empty bucket makes the loop sleep until the next token. The rest of the backlog waits SCHEDULED
(visible in ``QueueService.GetQueue``), it does not pile up in memory.

Rounds: a round names at most ``claim_targets`` of the targets with credits, chosen by
:class:`gnomon.dispatcher.rotation.TargetRotation` (shared evenly across namespaces first, queues
next; the others take their turn in the next rounds), and claims them all in one statement
(:func:`gnomon.common.storage.claims.claim_targets`); the retry-budget counts, rate-limit lookups,
token takes and give-backs of the round are one statement each too. So a round's cost does not grow
with the number of targets, and a namespace's queues are in every round however many another has.
While a cycle of rounds is not through every target, the loop goes on at once (after a 5 ms pause);
at the end of a cycle it sleeps until the earliest due time any of its rounds saw.

Isolation: normally all targets of a round share one claim statement. If it fails, the claim is
retried with each target inside its own savepoint. A target whose claim fails for a reason of its own (a row the code or the database refuses, e.g. a data error) is rolled
back to its savepoint alone, logged (escaped) and backed off -- skipped for
:data:`TARGET_BACKOFF_MIN_S`, doubling per consecutive failure up to :data:`TARGET_BACKOFF_MAX_S` --
while the other targets of the same transaction commit. Failures of the whole claim (database
unreachable, serialization failure, fencing) still abort it and are retried as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common import faults, metrics, tracing
from gnomon.common.config import DispatcherSettings
from gnomon.common.domain.attempts import Claimed
from gnomon.common.errors import StaleFencingToken, Unavailable
from gnomon.common.metric_batches import record_many
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage.engine import RETRYABLE_SQLSTATES, sqlstate
from gnomon.common.storage.fencing import Fence, Fenced, LeaseNotTrusted, run_fenced
from gnomon.common.storage.queues import CLOSED, HALF_OPEN, OPEN
from gnomon.dispatcher import tracing as dispatch_tracing
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import Cap, RetryBudget
from gnomon.dispatcher.hello import clip
from gnomon.dispatcher.rate_limits import RateLimits
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.rotation import TargetRotation
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.shards import ShardOwnership

log = logging.getLogger(__name__)

Target = tuple[str, str]  # (namespace, queue)

#: First back-off of a target whose claim failed on its own, seconds.
TARGET_BACKOFF_MIN_S = 1.0
#: Longest back-off of a failing target, seconds.
TARGET_BACKOFF_MAX_S = 60.0
#: Added to a timer armed for the next due job, seconds: uvloop's timers count whole milliseconds
#: and can fire up to ~1 ms early, and a claim that starts before the job is due by the database
#: clock finds nothing and must query again.
TIMER_SLACK_S = 0.001


def whole_claim_fault(exc: BaseException) -> bool:
    """True when ``exc`` must abort the whole claim transaction (and be retried as a whole): the
    database unreachable or the connection broken, a serialization failure or deadlock (40001,
    40P01: :func:`run_transaction` retries them), a fencing rejection, cancellation. False for a
    failure that belongs to one target (its savepoint is rolled back, the target backed off)."""
    if isinstance(exc, (asyncio.CancelledError, StaleFencingToken, LeaseNotTrusted, Unavailable, OSError)):
        return True
    if isinstance(exc, (OperationalError, InterfaceError)) or getattr(exc, "connection_invalidated", False):
        return True
    return sqlstate(exc) in RETRYABLE_SQLSTATES


class TargetBackoff:
    """Per-target back-off after claims that failed on their own. ``clock`` (seconds, monotonic) is
    injectable for tests. A target is skipped until its back-off ends; a success clears it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._until: dict[Target, float] = {}
        self._delay: dict[Target, float] = {}

    def failed(self, target: Target) -> float:
        """Records a failure of ``target``; returns its back-off in seconds (1, 2, 4 ... 60)."""
        d = min(TARGET_BACKOFF_MAX_S, self._delay.get(target, TARGET_BACKOFF_MIN_S / 2) * 2)
        self._delay[target] = d
        self._until[target] = self.clock() + d
        return d

    def succeeded(self, target: Target) -> None:
        """Clears ``target``'s back-off."""
        self._until.pop(target, None)
        self._delay.pop(target, None)

    def blocked(self, target: Target) -> bool:
        """True while ``target`` is backed off."""
        until = self._until.get(target)
        return until is not None and self.clock() < until

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest backed-off target may be tried again (None: none backed off)."""
        if not self._until:
            return None
        return max(0.0, min(self._until.values()) - self.clock())


@dataclass
class _Round:
    """One claim round: the fence it commits under, its targets' limits and breaker states, whether
    it ends a rotation cycle, its start (ns, for the claim spans); filled by its transaction: the
    retry-budget caps read and the targets whose claim failed alone."""

    fence: Fence
    limits: dict[Target, int]
    modes: dict[Target, str]
    cycle_end: bool
    t0: int
    caps: dict[Target, Cap] = field(default_factory=dict)
    failed: dict[Target, Exception] = field(default_factory=dict)


class ClaimLoop:
    """Claims in bounded batches (at most ``claim_batch`` per target and ``claim_targets`` targets per
    transaction, never more than the connected workers' credits) and hands the result to the relay."""

    def __init__(
        self,
        engine: AsyncEngine,
        shards: ShardOwnership,
        registry: SessionRegistry,
        relay: Relay,
        settings: DispatcherSettings,
        *,
        region: str,
        dispatcher_id: str,
        budget: RetryBudget,
        breakers: Breakers,
        rate_limits: RateLimits | None = None,
        wake: asyncio.Event | None = None,
    ):
        """``budget`` and ``breakers`` are required (and must be of ``region``): a claim loop without
        them would ignore OPEN queues and retry without limit. ``rate_limits`` defaults to the
        region's shared buckets; ``wake`` (default: a new event) wakes the loop early."""
        self.engine, self.shards, self.registry, self.relay = engine, shards, registry, relay
        self.settings, self.region, self.dispatcher_id = settings, region, dispatcher_id
        if budget.region != region or breakers.region != region:
            raise ValueError(
                f"the retry budget and breakers of a claim loop must be of its region {region!r}"
            )
        self.budget, self.breakers = budget, breakers
        self.rate_limits = rate_limits if rate_limits is not None else RateLimits(region=region)
        self.wake = wake if wake is not None else asyncio.Event()
        self.claimed_total = 0
        self.backoff = TargetBackoff()
        self.rotation = TargetRotation()
        self._cycle_due: float | None = None  # earliest due time seen in the current cycle (monotonic)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the loop."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops claiming (a claim in progress completes or rolls back)."""
        if self._task:
            self._task.cancel()

    async def claim_once(self) -> tuple[int, float | None]:
        """One claim transaction over all targets with credits. Returns ``(claimed, next_due_s)``:
        when every target got fewer jobs than it asked for, the same transaction also reads how
        long (database clock, seconds) until the next job of the owned shards is due within
        ``prefetch_s`` (``None``: none that close; 0: due now but locked by another claimer).
        Raises :class:`StaleFencingToken` (after dropping the shards) if fenced off.

        Three steps: :meth:`_plan` (targets and caps), :meth:`_claim` (the fenced transaction) and
        :meth:`_settle` (accounting and delivery after the commit)."""
        if self.relay.backlog:
            # attempts released, expired or recovered from the outbox go first: they were claimed
            # earlier, and some waited an outage already
            redelivered = await self.relay.recover_once()
            if redelivered:
                return redelivered, 0.0
        plan = self._plan()
        if plan is None:
            return 0, None
        done = await self._claim(plan)
        if done is None:
            return 0, None
        return self._settle(plan, *done)

    def _plan(self) -> _Round | None:
        """Step 1: the round's fence and targets, each with its claim limit (at most ``claim_batch``
        and its credits) and its breaker state; None when there is nothing to claim for."""
        t0 = time.time_ns() if tracing.ENABLED else 0  # the claim spans' start (docs/tracing.md)
        tokens = self.shards.tokens()
        region_token = self.shards.region_token
        cap = self.registry.capacity()
        if not tokens or not cap or region_token is None:  # no tokens without the region token
            return None
        batch = self.settings.claim_batch
        eligible = {
            t: min(batch, n)
            for t, n in cap.items()
            # circuit breakers: an OPEN queue is not claimed at all, a HALF_OPEN one only for probes
            if not self.backoff.blocked(t) and self.breakers.state(t) != OPEN
        }
        if not eligible:
            return None
        # at most claim_targets targets per round, fair across namespaces, then queues (rotation.py)
        chosen, cycle_end = self.rotation.pick(eligible, self.settings.claim_targets)
        limits = {t: eligible[t] for t in chosen}
        return _Round(
            fence=Fence(self.region, tokens, region_token, self.shards.trusted),
            limits=limits,
            modes={t: self.breakers.state(t) for t in limits},
            cycle_end=cycle_end,
            t0=t0,
        )

    async def _claim(self, plan: _Round) -> tuple[list[Claimed], float | None] | None:
        """Step 2: the claim transaction through :func:`run_fenced` (region fence, shard fences and
        the trusted lease checked before it commits): one claim statement for every target, and if
        that fails for a reason of one target, again with each target in its own savepoint. Returns
        ``(claimed, next_due_s)``, or None when the lease stopped being trusted (rolled back).
        Raises :class:`StaleFencingToken` after dropping the shards (or the region) it names."""
        try:
            try:
                return await self._fenced(plan, isolate=False)
            except Exception as exc:
                if whole_claim_fault(exc):
                    raise
                # one target's rows or code failed: claim again, each target in its own savepoint
                return await self._fenced(plan, isolate=True)
        except LeaseNotTrusted:
            log.warning("claim rolled back: the etcd lease stopped being trusted while it ran")
            return None
        except StaleFencingToken as e:
            if "region" in e.metadata:
                self.shards.region_stale()
            else:
                self.shards.drop([int(s) for s in e.metadata.get("shards", "").split(",") if s])
            log.warning("claim rejected by the fence: %s", e)
            raise

    async def _fenced(self, plan: _Round, *, isolate: bool) -> tuple[list[Claimed], float | None]:
        """One try of the claim transaction under ``plan.fence``: the claim statements, then (unless
        a target got all it asked for) the next due time, read in the same statement as the shard
        fences just before the commit (:meth:`Fenced.read_at_commit`: one round trip for both)."""
        holder: list[Fenced] = []

        async def tx(fx: Fenced) -> tuple[list[Claimed], bool, list[float]]:
            conn = fx.conn
            holder[:] = [fx]
            plan.caps.clear()
            plan.caps.update(await self.budget.caps(conn, list(plan.limits)))
            await self.rate_limits.refresh(conn, list(plan.limits))
            plan.failed.clear()
            out, full, idle, waits = await self._claim_groups(fx, plan, isolate)
            live = [t for t in plan.limits if t not in idle]
            if not full and live and plan.fence.tokens:
                params = claim_store.next_due_params(
                    region=self.region,
                    shards=list(plan.fence.tokens),
                    targets=live,
                    horizon_s=self.settings.prefetch_s,
                )
                fx.read_at_commit(claim_store.NEXT_DUE, params)
            return out, full, waits

        # test-only: SIGKILL with the claim written and fenced, not committed
        out, full, waits = await run_fenced(self.engine, plan.fence, tx, fault_point="crash_mid_claim")
        if full:
            return out, 0.0
        fx = holder[0]
        delay = claim_store.due_in(fx.read_value) if fx.read is not None else None
        if waits:
            delay = min(waits) if delay is None else min(delay, min(waits))
        return out, delay

    async def _claim_groups(
        self, fx: Fenced, plan: _Round, isolate: bool
    ) -> tuple[list[Claimed], bool, set[Target], list[float]]:
        """The claim statements of one transaction: normally one for every target (one failure aborts
        the claim); ``isolate``: one per target, each in its own savepoint, so a failing one fails
        alone (recorded in ``plan.failed``). Returns ``(claimed, full, idle targets, waits)``."""
        out: list[Claimed] = []
        full, waits, idle = False, [], set[Target]()
        groups = [plan.limits] if not isolate else [{t: n} for t, n in plan.limits.items()]
        for group in groups:
            try:
                if isolate:
                    async with fx.conn.begin_nested():  # a savepoint: this target fails alone
                        got, more, idle_of, waits_of = await self._claim_group(fx, plan, group)
                else:
                    got, more, idle_of, waits_of = await self._claim_group(fx, plan, group)
            except Exception as exc:
                if not isolate or whole_claim_fault(exc):
                    raise
                plan.failed.update(dict.fromkeys(group, exc))
                idle.update(group)
                continue
            idle |= idle_of
            waits += waits_of
            full = full or more
            out += got
        return out, full, idle, waits

    async def _claim_group(
        self, fx: Fenced, plan: _Round, group: dict[Target, int]
    ) -> tuple[list[Claimed], bool, set[Target], list[float]]:
        """Claims up to ``group[t]`` of each target of ``group`` in one claim statement: returns
        ``(claimed, full, idle targets, waits)``; ``full``: some target got all it asked for."""
        group, limited, idle, waits = await self._allowances(fx.conn, plan, group)
        got = await claim_store.claim_targets(
            fx, wants=self._wants(plan, group), dispatcher_id=self.dispatcher_id
        )
        per: dict[Target, int] = {}
        for c in got:
            per[(c.namespace, c.queue)] = per.get((c.namespace, c.queue), 0) + 1
        if limited:
            await self.rate_limits.give_back(fx.conn, {t: n - per.get(t, 0) for t, n in limited.items()})
        full = any(per.get(t, 0) >= n and plan.modes.get(t, CLOSED) != HALF_OPEN for t, n in group.items())
        return got, full, idle, waits

    async def _allowances(
        self, conn: AsyncConnection, plan: _Round, group: dict[Target, int]
    ) -> tuple[dict[Target, int], dict[Target, int], set[Target], list[float]]:
        """``group`` cut to the HALF_OPEN probes left and the rate-limit tokens taken: returns
        ``(group, limited, idle, waits)``; ``limited``: the tokens taken per rate-limited target (to
        give back what the claim does not use), ``idle``: the targets left out, ``waits``: seconds
        until an empty bucket's next token."""
        rl, idle, waits = self.rate_limits, set[Target](), list[float]()
        group = dict(group)
        for t in [t for t in group if plan.modes.get(t, CLOSED) == HALF_OPEN]:
            group[t] = min(group[t], await self.breakers.probe_allowance(conn, t))
            if group[t] <= 0:  # probes all out: nothing to claim until they finish
                idle.add(t)
                del group[t]
        limited = {t: n for t, n in group.items() if rl.limited(t)}
        if limited:
            for t, (n, wait) in (await rl.take(conn, limited)).items():
                if n <= 0:  # bucket empty: come back when the next token is due
                    idle.add(t)
                    waits.append(wait)
                    del group[t], limited[t]  # nothing taken: nothing to give back
                else:
                    group[t] = limited[t] = n
        return group, limited, idle, waits

    def _wants(self, plan: _Round, group: dict[Target, int]) -> list[claim_store.TargetClaim]:
        """What the claim statement asks of each target of ``group``."""
        wants = []
        for (ns, q), n in group.items():
            mode, c = plan.modes.get((ns, q), CLOSED), plan.caps.get((ns, q))
            wants.append(
                claim_store.TargetClaim(
                    ns,
                    q,
                    n,
                    # HALF_OPEN probes are few (GNOMON_BREAKER_PROBES) and are how the queue
                    # recovers: the retry budget must not hold them back, or an exhausted budget
                    # keeps the breaker HALF_OPEN for a whole window
                    retry_cap=(c.retries if c and mode != HALF_OPEN else None),
                    defer_step_s=c.spacing_s if c else 1.0,
                    breaker_state=mode if self.breakers.enabled else None,
                )
            )
        return wants

    def _settle(self, plan: _Round, claimed: list[Claimed], delay: float | None) -> tuple[int, float | None]:
        """Step 3, after the commit: back-offs of the targets that failed alone (and cleared for the
        others), the loop's delay, the retry budget spent, metrics and tracing, then delivery."""
        delay = self._cycle(plan.cycle_end, self._backoffs(plan, delay))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("claimed %d (limits %s), next due in %s s", len(claimed), plan.limits, delay)
        for target in plan.limits:
            self.budget.spent(
                target,
                sum(1 for c in claimed if (c.namespace, c.queue) == target and c.attempt > 1),
                plan.caps.get(target),
            )
        if claimed:
            faults.point("crash_after_claim")
            self.claimed_total += len(claimed)
            lags: dict[str, list[float]] = {}
            for c in claimed:
                lags.setdefault(c.queue, []).append(
                    max(0.0, (c.dispatched_at - c.scheduled_at).total_seconds())
                )
            for queue, values in lags.items():  # one record and one add per queue and claim (hot path)
                record_many(metrics.DISPATCH_LAG, values, {"queue": queue})
                metrics.CLAIMED.add(len(values), {"queue": queue})
            if tracing.ENABLED:
                dispatch_tracing.claimed(claimed, plan.t0, self.dispatcher_id)
            self.relay.deliver(claimed)
        return len(claimed), delay

    def _backoffs(self, plan: _Round, delay: float | None) -> float | None:
        """Backs off each target of ``plan`` whose claim failed alone and clears the others; returns
        ``delay`` shortened to the earliest end of a back-off, if one failed."""
        for target in plan.limits:
            fault = plan.failed.get(target)
            if fault is None:
                self.backoff.succeeded(target)
                continue
            backoff_s = self.backoff.failed(target)
            log.warning(
                "claims for namespace=%s queue=%s failed (%s: %s); backing off that queue %.0f s",
                clip(target[0]),
                clip(target[1]),
                type(fault).__name__,
                clip(str(fault), 200),
                backoff_s,
            )
        next_retry = self.backoff.next_retry_in() if plan.failed else None
        if next_retry is not None:
            delay = next_retry if delay is None else min(delay, next_retry)
        return delay

    def _cycle(self, cycle_end: bool, delay: float | None) -> float | None:
        """The loop's delay after a round (:mod:`gnomon.dispatcher.rotation`): 0 while targets of the
        cycle still wait their turn (the earliest due time seen is kept, monotonic clock); at the
        cycle's end, the earliest of the cycle's due times and ``delay``."""
        now = time.monotonic()
        if delay is not None:
            self._cycle_due = now + delay if self._cycle_due is None else min(self._cycle_due, now + delay)
        if not cycle_end:
            return 0.0
        earliest, self._cycle_due = self._cycle_due, None
        return None if earliest is None else max(0.0, earliest - now)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), max(0.0, seconds))
        except TimeoutError:
            pass
        self.wake.clear()

    async def _run(self) -> None:
        s = self.settings
        while True:
            try:
                n, delay = await self.claim_once()
                if n and delay == 0.0 and self.registry.capacity():
                    continue  # a full batch: more is probably due right now
                if delay is None:
                    await self._sleep(s.max_idle_poll_s)
                elif delay <= 0:
                    await self._sleep(0.005)  # due but locked by another claimer, or no credits left
                else:
                    await self._sleep(min(delay + TIMER_SLACK_S, s.max_idle_poll_s))
            except StaleFencingToken:
                continue
            except Unavailable as e:
                log.warning("claim loop: %s", e)
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claim loop error")
                await asyncio.sleep(0.5)
