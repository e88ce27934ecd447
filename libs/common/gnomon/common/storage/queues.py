"""Named queries of per-queue health: the retry budget's window counts, the circuit breaker's state
(``queue_state``, compare-and-set) and failure statistics, and the backlog figures of
``QueueService.GetQueue``.

Every read is bounded: the retry budget's window counts read the per-second claim counters
(:mod:`gnomon.common.storage.queue_counts`, migration 0020); live probes are read from the region's
open attempts (in-flight work); finished
attempts are read from one queue's range of ``(region, namespace, queue, finished_at)`` newest first,
with a ``LIMIT``; the backlog walks the due index of one queue with a ``LIMIT``. Instants are the
database's ``now()``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Interval, String, bindparam, case, func, literal, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.policies import BreakerState
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.queue_counts import WindowCounts, budget_counts, budget_counts_many
from gnomon.common.storage.schema import attempts, jobs, queue_state
from gnomon.common.storage.statements import named

CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN

#: Rows a window count reads at most; beyond it the counts are extrapolated (see :func:`budget_counts`).
MAX_COUNTED = 10_000
#: Due jobs :func:`read_backlog` counts at most.
MAX_DUE_COUNTED = 100_000

_REGION, _NS, _QUEUE = (
    bindparam("p_region", type_=String),
    bindparam("p_namespace", type_=String),
    bindparam("p_queue", type_=String),
)
_CAP = bindparam("p_cap", type_=Integer)


def _params(region: str, namespace: str, queue: str, **kw: Any) -> dict[str, Any]:
    return {"p_region": region, "p_namespace": namespace, "p_queue": queue, **kw}


# ---- retry budget: counted per queue and second (queue_counts) --------------------------------

__all__ = ["WindowCounts", "budget_counts", "budget_counts_many"]  # re-exported


# ---- circuit breaker -------------------------------------------------------------------------

_FAILED = attempts.c.state.in_([AttemptState.FAILED, AttemptState.LOST]) & (
    func.coalesce(attempts.c.failure_class, "") != FailureClass.PERMANENT
)
_COUNTED = (attempts.c.state == AttemptState.SUCCEEDED) | _FAILED
_finished = (
    select(_COUNTED.label("counted"), _FAILED.label("failed"))
    .where(
        attempts.c.region == _REGION,
        attempts.c.namespace == _NS,
        attempts.c.queue == _QUEUE,
        attempts.c.finished_at
        >= func.greatest(
            func.now() - bindparam("p_window", type_=Interval),
            bindparam("p_since", type_=attempts.c.finished_at.type),
        ),
    )
    .order_by(attempts.c.finished_at.desc())
    .limit(_CAP)
    .subquery()
)
FAILURE_STATS = named(
    __name__,
    "FAILURE_STATS",
    """Results counted by the breaker (SUCCEEDED, or FAILED/LOST not PERMANENT) and failures among them,
    of attempts finished since max(now() - window, p_since), newest first, at most ``p_cap`` rows.""",
    select(
        func.coalesce(func.sum(case((_finished.c.counted, 1), else_=0)), 0),
        func.coalesce(func.sum(case((_finished.c.failed, 1), else_=0)), 0),
    ),
)


async def failure_stats(
    conn: AsyncConnection,
    *,
    region: str,
    namespace: str,
    queue: str,
    window_s: float,
    since: datetime,
    cap: int = MAX_COUNTED,
) -> tuple[int, int]:
    """``(results, failures)`` of the queue's attempts finished in the last ``window_s`` seconds and
    not before ``since``. A result is a SUCCEEDED attempt or a failure; a failure is a FAILED or LOST
    attempt whose class is not PERMANENT (bad input says nothing about the dependency's health);
    cancelled attempts are not counted."""
    total, failed = (
        await conn.execute(
            FAILURE_STATS,
            _params(region, namespace, queue, p_window=timedelta(seconds=window_s), p_since=since, p_cap=cap),
        )
    ).one()
    return int(total), int(failed)


_SINCE = bindparam("p_since", type_=attempts.c.claimed_at.type)
_probes = (
    select(attempts.c.state, attempts.c.failure_class)
    .where(
        attempts.c.region == _REGION,
        attempts.c.namespace == _NS,
        attempts.c.queue == _QUEUE,
        attempts.c.finished_at >= _SINCE,  # ix_attempts_finished; claimed since => finished since
        attempts.c.claimed_at >= _SINCE,
    )
    .order_by(attempts.c.finished_at)
    .limit(_CAP)
    .subquery()
)
_pf = _probes.c.state.in_([AttemptState.FAILED, AttemptState.LOST]) & (
    func.coalesce(_probes.c.failure_class, "") != FailureClass.PERMANENT
)
_live = (
    select(func.count())
    .where(
        attempts.c.region == _REGION,
        attempts.c.finished_at.is_(None),  # ix_attempts_open: the region's in-flight attempts
        attempts.c.namespace == _NS,
        attempts.c.queue == _QUEUE,
        attempts.c.claimed_at >= _SINCE,
    )
    .scalar_subquery()
)
PROBE_STATS = named(
    __name__,
    "PROBE_STATS",
    """Attempts claimed since ``p_since`` (the HALF_OPEN transition): succeeded, failed (of those
    finished, at most ``p_cap``, read by finish time) and still live (not finished).""",
    select(
        func.coalesce(func.sum(case((_probes.c.state == AttemptState.SUCCEEDED, 1), else_=0)), 0),
        func.coalesce(func.sum(case((_pf, 1), else_=0)), 0),
        _live,
    ),
)


async def probe_stats(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, since: datetime, cap: int = 10_000
) -> tuple[int, int, int]:
    """``(succeeded, failed, live)`` among the queue's attempts claimed at or after ``since`` (the
    probes of a HALF_OPEN breaker); failed as in :func:`failure_stats`, live = QUEUED or RUNNING.
    The finished ones come from the queue's finished-attempts index (claimed since ``since`` implies
    finished since), the live ones from the region's open attempts (in-flight work only)."""
    s, f, live = (
        await conn.execute(PROBE_STATS, _params(region, namespace, queue, p_since=since, p_cap=cap))
    ).one()
    return int(s), int(f), int(live)


GET_STATE = named(
    __name__,
    "GET_STATE",
    """The queue_state row of (p_region, p_namespace, p_queue), if any.""",
    select(queue_state).where(
        queue_state.c.region == _REGION, queue_state.c.namespace == _NS, queue_state.c.queue == _QUEUE
    ),
)
LOCK_STATE = named(
    __name__,
    "LOCK_STATE",
    """As GET_STATE, the row locked FOR UPDATE.""",
    GET_STATE.with_for_update(),
)


async def get_state(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, lock: bool = False
) -> dict[str, Any] | None:
    """The queue's ``queue_state`` row (``None``: never evaluated, i.e. CLOSED); ``lock`` takes its row
    lock (``FOR UPDATE``) until the transaction ends."""
    row = (
        (await conn.execute(LOCK_STATE if lock else GET_STATE, _params(region, namespace, queue)))
        .mappings()
        .first()
    )
    return dict(row) if row else None


async def ensure_state(conn: AsyncConnection, *, region: str, namespace: str, queue: str) -> dict[str, Any]:
    """The queue's ``queue_state`` row, created CLOSED (version 1) if missing."""
    row = await get_state(conn, region=region, namespace=namespace, queue=queue)
    if row is not None:
        return row
    await conn.execute(INSERT_STATE, {"p_region": region, "p_namespace": namespace, "p_queue": queue})
    row = await get_state(conn, region=region, namespace=namespace, queue=queue)
    assert row is not None  # inserted above, or by a concurrent caller
    return row


INSERT_STATE = named(
    __name__,
    "INSERT_STATE",
    """Creates the ``queue_state`` row of (``p_region``, ``p_namespace``, ``p_queue``): CLOSED,
    version 1, ``updated_at = now()``; nothing if it exists.""",
    pg_insert(queue_state)
    .values(
        region=bindparam("p_region", type_=String),
        namespace=bindparam("p_namespace", type_=String),
        queue=bindparam("p_queue", type_=String),
        state=CLOSED,
        version=1,
        updated_at=func.now(),
    )
    .on_conflict_do_nothing(index_elements=["region", "namespace", "queue"]),
)


_TO = bindparam("p_to", type_=String)
TRANSITION = named(
    __name__,
    "TRANSITION",
    """Compare-and-set of a breaker state: only from ``p_from`` at ``p_version``, and (for OPEN ->
    HALF_OPEN) only once ``p_min_open`` has passed since ``opened_at`` by the database clock.""",
    queue_state.update()
    .where(
        queue_state.c.region == _REGION,
        queue_state.c.namespace == _NS,
        queue_state.c.queue == _QUEUE,
        queue_state.c.state == bindparam("p_from", type_=String),
        queue_state.c.version == bindparam("p_version", type_=queue_state.c.version.type),
        func.coalesce(queue_state.c.opened_at, func.now())
        <= func.now() - bindparam("p_min_open", type_=Interval),
    )
    .values(
        state=_TO,
        version=queue_state.c.version + 1,
        updated_at=func.now(),
        opened_at=case((_TO == literal(OPEN), func.now()), else_=queue_state.c.opened_at),
        opened_count=queue_state.c.opened_count + case((_TO == literal(OPEN), 1), else_=0),
        failure_ratio=bindparam("p_ratio", type_=queue_state.c.failure_ratio.type),
        window_results=bindparam("p_results", type_=Integer),
    )
    .returning(*queue_state.c),
)


async def transition(
    conn: AsyncConnection,
    row: dict[str, Any],
    to: str,
    *,
    ratio: float = 0.0,
    results: int = 0,
    min_open_s: float = 0.0,
) -> dict[str, Any] | None:
    """Moves the breaker of ``row`` (a ``queue_state`` row as read) to ``to`` if it is still in the
    state and version read (compare-and-set; from OPEN only after ``min_open_s`` since it opened).
    Returns the new row, or ``None`` when another dispatcher changed it first (nothing written).
    ``ratio``/``results``: the figures that justified the change, kept on the row."""
    new = (
        (
            await conn.execute(
                TRANSITION,
                _params(
                    row["region"],
                    row["namespace"],
                    row["queue"],
                    p_from=row["state"],
                    p_version=row["version"],
                    p_to=to,
                    p_min_open=timedelta(seconds=min_open_s),
                    p_ratio=float(ratio),
                    p_results=int(results),
                ),
            )
        )
        .mappings()
        .first()
    )
    return dict(new) if new else None


# ---- backlog (GetQueue) ----------------------------------------------------------------------

_due = (
    select(jobs.c.id)
    .where(
        jobs.c.region == _REGION,
        jobs.c.namespace == _NS,
        jobs.c.queue == _QUEUE,
        state_is(jobs.c.state, JobState.SCHEDULED),
        jobs.c.scheduled_at <= func.now(),
    )
    .limit(_CAP)
    .subquery()
)
DUE_COUNT = named(
    __name__,
    "DUE_COUNT",
    """How many SCHEDULED jobs of one queue are due now (see _due).""",
    select(func.count()).select_from(_due),
)
OLDEST_DUE = named(
    __name__,
    "OLDEST_DUE",
    """The oldest due scheduled_at of one queue (see _due).""",
    select(func.extract("epoch", func.now() - jobs.c.scheduled_at))
    .where(
        jobs.c.region == _REGION,
        jobs.c.namespace == _NS,
        jobs.c.queue == _QUEUE,
        state_is(jobs.c.state, JobState.SCHEDULED),
        jobs.c.scheduled_at <= func.now(),
    )
    .order_by(jobs.c.scheduled_at)
    .limit(1),
)


async def read_backlog(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, cap: int = MAX_DUE_COUNTED
) -> tuple[int, bool, float | None]:
    """``(due_jobs, truncated, oldest_due_age_s)``: SCHEDULED jobs of the queue whose schedule time
    passed (database clock), counted up to ``cap`` (``truncated`` when there are more), and how long
    the oldest of them has been due (``None`` when none is)."""
    n = int((await conn.execute(DUE_COUNT, _params(region, namespace, queue, p_cap=cap + 1))).scalar_one())
    age = (await conn.execute(OLDEST_DUE, _params(region, namespace, queue))).scalar()
    return min(n, cap), n > cap, None if age is None else max(0.0, float(age))
