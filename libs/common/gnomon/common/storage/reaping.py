"""Named queries of the reaper: lost leases, passed deadlines, retention. All bounded, all
``FOR UPDATE SKIP LOCKED`` (competing reapers need no leader), all on the database clock.

Lease expiry (DESIGN.md sections 3 and 4): an attempt **RUNNING** whose lease ended, or that has
run longer than its job's ``start_to_close`` since it was accepted, more than
``skew_margin_s`` ago (database clock) is marked ``LOST``. Its outcome is unknown (the worker may have
performed the effect and lost only the ack), so the job is retried only if it is declared
idempotent and attempts remain; otherwise it goes to the DLQ (``DEAD``, failure class AMBIGUOUS). A
job whose cancellation was requested becomes ``CANCELLED``. Attempts still **QUEUED** (delivered,
never accepted) are not the reaper's: the outbox relay re-delivers them and restarts their lease.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import Select, Update, delete, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common import states as S
from gnomon.common.domain.attempts import Reaped
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.storage.jobs import POLICY_COLS
from gnomon.common.storage.results import fail_job_stmt, judge
from gnomon.common.storage.statements import builder
from gnomon.common.storage.schema import attempts, jobs, outbox, schedule_occurrences

LOST_ERROR = "lease expired while running: the worker stopped heartbeating; outcome unknown"
TIMEOUT_ERROR = "start_to_close exceeded: the attempt ran longer than its job allows; outcome unknown"


async def reap_lost_leases(
    conn: AsyncConnection,
    *,
    region: str,
    skew_margin_s: float,
    limit: int,
    retry_delay_s: Callable[[int], float] | None = None,
) -> list[Reaped]:
    """Marks up to ``limit`` expired RUNNING attempts of ``region`` LOST and moves their jobs on
    (compare-and-set: the job must still be RUNNING at that attempt). Whether and when the job is
    retried is the after-failure transition's decision for an AMBIGUOUS failure
    (:func:`gnomon.common.domain.transitions.after_failure`, the one the result path uses:
    idempotent jobs only, attempts left, ``max_age``; a cancel request makes it CANCELLED);
    ``retry_delay_s(attempt)`` (seconds), when given, replaces the policy's delay (tests)."""
    margin = timedelta(seconds=skew_margin_s)
    lost = [
        (j, a, LOST_ERROR)
        for j, a in (
            await conn.execute(
                select(attempts.c.job_id, attempts.c.attempt)
                .where(
                    attempts.c.region == region,
                    attempts.c.state == S.A_RUNNING,
                    attempts.c.lease_expires_at < func.now() - margin,
                )
                .order_by(attempts.c.lease_expires_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()
    ]
    # start_to_close: an attempt running longer than its job allows is timed out the same way (its
    # worker may still be running it, so the outcome is just as unknown)
    seen = {(j, a) for j, a, _ in lost}
    lost += [
        (j, a, TIMEOUT_ERROR)
        for j, a in (
            await conn.execute(
                select(attempts.c.job_id, attempts.c.attempt)
                .join(jobs, (jobs.c.id == attempts.c.job_id) & (jobs.c.attempt == attempts.c.attempt))
                .where(
                    attempts.c.region == region,
                    attempts.c.state == S.A_RUNNING,
                    jobs.c.start_to_close_ms.is_not(None),
                    attempts.c.accepted_at + jobs.c.start_to_close_ms * timedelta(milliseconds=1)
                    < func.now() - margin,
                )
                .limit(max(0, limit - len(lost)))
                .with_for_update(of=attempts, skip_locked=True)
            )
        ).all()
        if (j, a) not in seen
    ]
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
        state = (await conn.execute(stmt)).scalar_one()
        out.append(Reaped(job_id, attempt, JobState(state)))
    return out


@builder(job_id=uuid.UUID(int=1), attempt=1, error="e")
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


@builder(job_id=uuid.UUID(int=1), attempt=1)
def lost_job_stmt(job_id: uuid.UUID, attempt: int) -> Select[tuple[Any, ...]]:
    """Job ``job_id`` if still RUNNING at ``attempt``, locked ``FOR UPDATE``: ``max_attempts``,
    ``idempotent``, ``cancel_requested_at``, the retry policy columns and ``age_s`` (seconds since its
    first dispatch, database clock)."""
    return (
        select(
            jobs.c.max_attempts,
            jobs.c.idempotent,
            jobs.c.cancel_requested_at,
            *POLICY_COLS,
            func.extract("epoch", func.now() - jobs.c.first_dispatched_at).label("age_s"),
        )
        .where(jobs.c.id == job_id, jobs.c.attempt == attempt, jobs.c.state == JobState.RUNNING)
        .with_for_update()
    )


async def expire_deadlines(conn: AsyncConnection, *, region: str, limit: int) -> list[uuid.UUID]:
    """SCHEDULED jobs of ``region`` whose deadline passed (database clock) -> EXPIRED, at most
    ``limit``; they are never dispatched (the claim also refuses them). Returns their ids."""
    due = (
        select(jobs.c.id)
        .where(jobs.c.region == region, jobs.c.state == S.SCHEDULED, jobs.c.deadline <= func.now())
        .order_by(jobs.c.deadline)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list(
        (
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(due.scalar_subquery()), jobs.c.state == S.SCHEDULED)
                .values(
                    state=S.EXPIRED,
                    version=jobs.c.version + 1,
                    finished_at=func.now(),
                    last_error="deadline passed before dispatch",
                )
                .returning(jobs.c.id)
            )
        )
        .scalars()
        .all()
    )


async def prune_finished(conn: AsyncConnection, *, region: str, retention_s: float, limit: int) -> int:
    """Deletes up to ``limit`` terminal jobs of ``region`` finished more than ``retention_s`` seconds
    ago, with their attempt and outbox rows. Returns how many jobs were deleted."""
    ids = list(
        (
            await conn.execute(
                select(jobs.c.id)
                .where(
                    jobs.c.region == region,
                    jobs.c.state.in_(sorted(S.TERMINAL)),
                    jobs.c.finished_at < func.now() - timedelta(seconds=retention_s),
                )
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )
        .scalars()
        .all()
    )
    if ids:
        await conn.execute(delete(outbox).where(outbox.c.job_id.in_(ids)))
        await conn.execute(delete(attempts).where(attempts.c.job_id.in_(ids)))
        await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
    return len(ids)


async def prune_decisions(conn: AsyncConnection, *, region: str, retention_s: float, limit: int) -> int:
    """Deletes up to ``limit`` schedule decision records of ``region`` decided more than
    ``retention_s`` seconds ago (BUFFERED ones wait to be released and are kept). Returns how many."""
    t = schedule_occurrences
    keys = (
        await conn.execute(
            select(t.c.schedule_uid, t.c.nominal_time)
            .where(
                t.c.region == region,
                t.c.decided_at < func.now() - timedelta(seconds=retention_s),
                t.c.decision != "BUFFERED",
            )
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    ).all()
    if keys:
        await conn.execute(
            delete(t).where(tuple_(t.c.schedule_uid, t.c.nominal_time).in_([tuple(k) for k in keys]))
        )
    return len(keys)
