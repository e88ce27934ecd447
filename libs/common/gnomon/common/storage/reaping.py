"""Named queries of the reaper: lost leases, passed deadlines, retention. All bounded, all
``FOR UPDATE SKIP LOCKED`` (competing reapers need no leader), all on the database clock.

Lease expiry (docs/concepts.md: the job lifecycle, invariants 2 and 3): an attempt **RUNNING**
whose lease ended, or that has run longer than its job's ``start_to_close`` since it was accepted, more than
``skew_margin_s`` ago (database clock) is marked ``LOST``. Its outcome is unknown (the worker may have
performed the effect and lost only the ack), so the job is retried only if it is declared
idempotent and attempts remain; otherwise it goes to the DLQ (``DEAD``, failure class AMBIGUOUS). A
job whose cancellation was requested becomes ``CANCELLED``. Attempts still **QUEUED** (delivered,
never accepted) are not the reaper's: the outbox relay re-delivers them and restarts their lease.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Delete, Select, Update, delete, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.attempts import Reaped
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.policies import OccurrenceDecision
from gnomon.common.domain.states import TERMINAL, AttemptState, JobState
from gnomon.common.storage.job_view import RUNNING_ROW
from gnomon.common.storage.jobs import POLICY_COLS
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.results import fail_job_stmt, judge
from gnomon.common.storage.schema import attempts, jobs, schedule_occurrences
from gnomon.common.storage.schema_tenancy import namespaces
from gnomon.common.storage.statements import builder

LOST_ERROR = "lease expired while running: the worker stopped heartbeating; outcome unknown"
TIMEOUT_ERROR = "start_to_close exceeded: the attempt ran longer than its job allows; outcome unknown"


_ID = uuid.UUID(int=1)


@builder(region="r", skew_margin_s=1.0, limit=10)
def expired_leases_stmt(region: str, skew_margin_s: float, limit: int) -> Select[tuple[uuid.UUID, int]]:
    """Up to ``limit`` RUNNING attempts ``(job_id, attempt)`` of ``region`` whose lease ended more
    than ``skew_margin_s`` seconds ago (database clock), oldest lease first, locked ``FOR UPDATE SKIP
    LOCKED``. Reads the open attempts of the region (``ix_attempts_open``: in-flight work only, no
    index on ``lease_expires_at``, which every heartbeat changes)."""
    return (
        select(attempts.c.job_id, attempts.c.attempt)
        .where(
            attempts.c.region == region,
            attempts.c.finished_at.is_(None),  # the predicate of ix_attempts_open
            state_is(attempts.c.state, AttemptState.RUNNING),
            attempts.c.lease_expires_at < func.now() - timedelta(seconds=skew_margin_s),
        )
        .order_by(attempts.c.lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


@builder(region="r", skew_margin_s=1.0, limit=10)
def timed_out_stmt(region: str, skew_margin_s: float, limit: int) -> Select[tuple[uuid.UUID, int]]:
    """Up to ``limit`` RUNNING attempts ``(job_id, attempt)`` of ``region`` accepted longer ago than
    their job's ``start_to_close_ms`` plus ``skew_margin_s`` seconds (database clock), locked ``FOR
    UPDATE SKIP LOCKED`` (the attempt rows only)."""
    return (
        select(attempts.c.job_id, attempts.c.attempt)
        .join(jobs, (jobs.c.id == attempts.c.job_id) & (jobs.c.attempt == attempts.c.attempt))
        .where(
            attempts.c.region == region,
            attempts.c.finished_at.is_(None),  # the predicate of ix_attempts_open
            state_is(attempts.c.state, AttemptState.RUNNING),
            jobs.c.start_to_close_ms.is_not(None),
            attempts.c.accepted_at + jobs.c.start_to_close_ms * timedelta(milliseconds=1)
            < func.now() - timedelta(seconds=skew_margin_s),
        )
        .limit(limit)
        .with_for_update(of=attempts, skip_locked=True)
    )


@builder(job_id=_ID, attempt=1, error="e")
def lose_attempt_stmt(job_id: uuid.UUID, attempt: int, error: str) -> Update:
    """Attempt ``(job_id, attempt)`` -> LOST, ``finished_at = now()``, failure class AMBIGUOUS,
    ``error`` (why the outcome is unknown)."""
    return (
        update(attempts)
        .where(attempts.c.job_id == job_id, attempts.c.attempt == attempt)
        .values(
            state=AttemptState.LOST, finished_at=func.now(), failure_class=FailureClass.AMBIGUOUS, error=error
        )
    )


@builder(job_id=_ID, attempt=1)
def lost_job_stmt(job_id: uuid.UUID, attempt: int) -> Select[tuple[Any, ...]]:
    """Job ``job_id`` if still running at ``attempt`` (row RUNNING, or QUEUED: its attempt, just
    made LOST by the caller, was RUNNING; :mod:`gnomon.common.storage.job_view`), locked ``FOR UPDATE``: ``max_attempts``,
    ``idempotent``, ``cancel_requested_at``, ``trace_context``, the retry policy columns and ``age_s`` (seconds since its
    first dispatch, database clock)."""
    return (
        select(
            jobs.c.max_attempts,
            jobs.c.idempotent,
            jobs.c.cancel_requested_at,
            jobs.c.trace_context,
            *POLICY_COLS,
            func.extract("epoch", func.now() - jobs.c.first_dispatched_at).label("age_s"),
        )
        .where(jobs.c.id == job_id, jobs.c.attempt == attempt, RUNNING_ROW)
        .with_for_update()
    )


async def reap_lost_leases(
    conn: AsyncConnection,
    *,
    region: str,
    skew_margin_s: float,
    limit: int,
    retry_delay_s: Callable[[int], float] | None = None,
) -> list[Reaped]:
    """Marks up to ``limit`` expired RUNNING attempts of ``region`` LOST and moves their jobs on
    (compare-and-set: the job must still be running at that attempt, its row RUNNING or QUEUED: the
    accept writes only the attempt, :mod:`gnomon.common.storage.job_view`). Whether and when the job is
    retried is the after-failure transition's decision for an AMBIGUOUS failure
    (:func:`gnomon.common.domain.transitions.after_failure`, the one the result path uses:
    idempotent jobs only, attempts left, ``max_age``; a cancel request makes it CANCELLED, the
    ``CASE`` of :func:`gnomon.common.storage.results.fail_job_stmt`);
    ``retry_delay_s(attempt)`` (seconds), when given, replaces the policy's delay (tests)."""
    rows = (await conn.execute(expired_leases_stmt(region, skew_margin_s, limit))).all()
    lost = [(j, a, LOST_ERROR) for j, a in rows]
    # start_to_close: an attempt running longer than its job allows is timed out the same way (its
    # worker may still be running it, so the outcome is just as unknown)
    seen = {(j, a) for j, a, _ in lost}
    rows = (await conn.execute(timed_out_stmt(region, skew_margin_s, max(0, limit - len(lost))))).all()
    lost += [(j, a, TIMEOUT_ERROR) for j, a in rows if (j, a) not in seen]
    out = []
    for job_id, attempt, error in lost:
        await conn.execute(lose_attempt_stmt(job_id, attempt, error))
        job = (await conn.execute(lost_job_stmt(job_id, attempt))).mappings().first()
        if job is None:
            continue  # the job moved on already (e.g. a late result landed)
        outcome = judge(
            job,
            attempt,
            FailureClass.AMBIGUOUS,
            error,
            delay_override_s=None if retry_delay_s is None else retry_delay_s(attempt),
        )
        stmt = fail_job_stmt(job_id, attempt, outcome, failure_class=FailureClass.AMBIGUOUS, error=error)
        state, namespace, queue = (await conn.execute(stmt)).one()
        out.append(Reaped(job_id, attempt, JobState(state), namespace, queue, error, job["trace_context"]))
    return out


@builder(region="r", limit=10)
def expire_deadlines_stmt(region: str, limit: int) -> Update:
    """SCHEDULED jobs of ``region`` whose deadline passed (database clock), at most ``limit``, the
    earliest deadline first, locked ``FOR UPDATE SKIP LOCKED`` -> EXPIRED (version + 1,
    ``finished_at = now()``, ``last_error``); returns their ids."""
    due = (
        select(jobs.c.id)
        .where(
            jobs.c.region == region, state_is(jobs.c.state, JobState.SCHEDULED), jobs.c.deadline <= func.now()
        )
        .order_by(jobs.c.deadline)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return (
        update(jobs)
        .where(jobs.c.id.in_(due.scalar_subquery()), jobs.c.state == JobState.SCHEDULED)
        .values(
            state=JobState.EXPIRED,
            version=jobs.c.version + 1,
            finished_at=func.now(),
            last_error="deadline passed before dispatch",
        )
        .returning(jobs.c.id)
    )


async def expire_deadlines(conn: AsyncConnection, *, region: str, limit: int) -> list[uuid.UUID]:
    """SCHEDULED jobs of ``region`` whose deadline passed (database clock) -> EXPIRED, at most
    ``limit``; they are never dispatched (the claim also refuses them). Returns their ids."""
    return list((await conn.execute(expire_deadlines_stmt(region, limit))).scalars().all())


@builder(region="r", retention_s=60.0, limit=10)
def finished_jobs_stmt(region: str, retention_s: float, limit: int) -> Select[tuple[uuid.UUID]]:
    """Ids of up to ``limit`` terminal jobs of ``region`` past their retention (database clock),
    locked ``FOR UPDATE SKIP LOCKED``: their namespace's ``retention_s`` when its row sets one (> 0),
    else ``retention_s`` (the cluster's ``GNOMON_REAPER_RETENTION_S``), seconds after ``finished_at``.
    Oldest finished first, through ``ix_jobs_finished`` (migration 0014); jobs of a namespace whose
    retention is longer than the shortest are read again on each sweep until they are due."""
    keep_s = func.coalesce(func.nullif(namespaces.c.retention_s, 0), retention_s)
    # The shortest retention of any namespace (or the cluster's): no job finished later than
    # now() minus it can be due, so the scan walks ix_jobs_finished from the oldest up to that bound.
    shortest = func.least(
        retention_s,
        func.coalesce(
            select(func.min(func.nullif(namespaces.c.retention_s, 0))).scalar_subquery(), retention_s
        ),
    )
    return (
        select(jobs.c.id)
        .select_from(jobs.outerjoin(namespaces, namespaces.c.name == jobs.c.namespace))
        .where(
            jobs.c.region == region,
            jobs.c.finished_at < func.now() - shortest * timedelta(seconds=1),
            jobs.c.state.in_(sorted(TERMINAL)),
            jobs.c.finished_at + keep_s * timedelta(seconds=1) < func.now(),
        )
        .order_by(jobs.c.finished_at)
        .limit(limit)
        .with_for_update(of=jobs, skip_locked=True)
    )


@builder(ids=[_ID])
def delete_jobs_stmts(ids: Sequence[uuid.UUID]) -> tuple[Delete, Delete]:
    """Deletes jobs ``ids`` with their attempt rows: two statements, to run in order."""
    return (
        delete(attempts).where(attempts.c.job_id.in_(ids)),
        delete(jobs).where(jobs.c.id.in_(ids)),
    )


async def prune_finished(conn: AsyncConnection, *, region: str, retention_s: float, limit: int) -> int:
    """Deletes up to ``limit`` terminal jobs of ``region`` past their retention (their namespace's,
    else ``retention_s`` seconds; see :func:`finished_jobs_stmt`), with their attempt rows.
    Returns how many jobs were deleted."""
    ids = list((await conn.execute(finished_jobs_stmt(region, retention_s, limit))).scalars().all())
    if ids:
        for stmt in delete_jobs_stmts(ids):
            await conn.execute(stmt)
    return len(ids)


@builder(region="r", retention_s=60.0, limit=10)
def old_decisions_stmt(region: str, retention_s: float, limit: int) -> Select[Any]:
    """Keys ``(schedule_uid, nominal_time)`` of up to ``limit`` decision records of ``region``
    decided more than ``retention_s`` seconds ago (database clock) and not BUFFERED, locked ``FOR
    UPDATE SKIP LOCKED``."""
    t = schedule_occurrences
    return (
        select(t.c.schedule_uid, t.c.nominal_time)
        .where(
            t.c.region == region,
            t.c.decided_at < func.now() - timedelta(seconds=retention_s),
            t.c.decision != OccurrenceDecision.BUFFERED,
        )
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


@builder(keys=[(_ID, datetime(2026, 1, 1, tzinfo=UTC))])
def delete_decisions_stmt(keys: Sequence[tuple[uuid.UUID, datetime]]) -> Delete:
    """Deletes the decision records ``keys`` (``(schedule_uid, nominal_time)`` pairs)."""
    t = schedule_occurrences
    return delete(t).where(tuple_(t.c.schedule_uid, t.c.nominal_time).in_(list(keys)))


async def prune_decisions(conn: AsyncConnection, *, region: str, retention_s: float, limit: int) -> int:
    """Deletes up to ``limit`` schedule decision records of ``region`` decided more than
    ``retention_s`` seconds ago (BUFFERED ones wait to be released and are kept). Returns how many."""
    keys = (await conn.execute(old_decisions_stmt(region, retention_s, limit))).all()
    if keys:
        await conn.execute(delete_decisions_stmt([(k[0], k[1]) for k in keys]))
    return len(keys)
