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
from gnomon.common.storage.failing import JUDGE_COLS, Failure, fail_many, judge
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.schema import attempts, jobs, schedule_occurrences
from gnomon.common.storage.schema_tenancy import namespaces
from gnomon.common.storage.statements import builder

LOST_ERROR = "lease expired while running: the worker stopped heartbeating; outcome unknown"
TIMEOUT_ERROR = "start_to_close exceeded: the attempt ran longer than its job allows; outcome unknown"


_ID = uuid.UUID(int=1)


#: The columns of a lost attempt the write needs: its key and compare-and-set (``token``,
#: ``version``), and its job's judgement columns (:data:`gnomon.common.storage.failing.JUDGE_COLS`)
#: and ``trace_context``, NULL when the job is no longer at that attempt.
_LOST_COLS = (
    attempts.c.job_id,
    attempts.c.attempt,
    attempts.c.token,
    attempts.c.version,
    jobs.c.id.label("current"),
    jobs.c.trace_context,
    *JUDGE_COLS,
)
_AT_ATTEMPT = (jobs.c.id == attempts.c.job_id) & (jobs.c.attempt == attempts.c.attempt)


@builder(region="r", skew_margin_s=1.0, limit=10)
def expired_leases_stmt(region: str, skew_margin_s: float, limit: int) -> Select[tuple[Any, ...]]:
    """Up to ``limit`` RUNNING attempts of ``region`` whose lease ended more than ``skew_margin_s``
    seconds ago (database clock), oldest lease first, locked ``FOR UPDATE SKIP LOCKED`` (the attempt
    rows only), with their jobs' columns when the job is at that attempt (:data:`_LOST_COLS`). Reads
    the open attempts of the region (``ix_attempts_open``: in-flight work only, no index on
    ``lease_expires_at``, which every heartbeat changes)."""
    return (
        select(*_LOST_COLS)
        .select_from(attempts.outerjoin(jobs, _AT_ATTEMPT))
        .where(
            attempts.c.region == region,
            attempts.c.finished_at.is_(None),  # the predicate of ix_attempts_open
            state_is(attempts.c.state, AttemptState.RUNNING),
            attempts.c.lease_expires_at < func.now() - timedelta(seconds=skew_margin_s),
        )
        .order_by(attempts.c.lease_expires_at)
        .limit(limit)
        .with_for_update(of=attempts, skip_locked=True)
    )


@builder(region="r", skew_margin_s=1.0, limit=10)
def timed_out_stmt(region: str, skew_margin_s: float, limit: int) -> Select[tuple[Any, ...]]:
    """Up to ``limit`` RUNNING attempts of ``region`` accepted longer ago than their job's
    ``start_to_close_ms`` plus ``skew_margin_s`` seconds (database clock), locked ``FOR UPDATE SKIP
    LOCKED`` (the attempt rows only), with their jobs' columns (:data:`_LOST_COLS`)."""
    return (
        select(*_LOST_COLS)
        .join(jobs, _AT_ATTEMPT)
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


async def reap_lost_leases(
    conn: AsyncConnection,
    *,
    region: str,
    skew_margin_s: float,
    limit: int,
    retry_delay_s: Callable[[int], float] | None = None,
) -> list[Reaped]:
    """Marks up to ``limit`` expired RUNNING attempts of ``region`` LOST and moves their jobs on
    (compare-and-set: the attempt must still be RUNNING under the token and version read, the job
    still running at that attempt, its row RUNNING or QUEUED: the accept writes only the attempt,
    :mod:`gnomon.common.storage.job_view`). Whether and when the job is retried is the after-failure
    transition's decision for an AMBIGUOUS failure (:func:`gnomon.common.domain.transitions.after_failure`,
    the one the result path uses: idempotent jobs only, attempts left, ``max_age``; a cancel request
    makes it CANCELLED, the ``CASE`` of :data:`gnomon.common.storage.failing.FAIL_MANY`);
    ``retry_delay_s(attempt)`` (seconds), when given, replaces the policy's delay (tests).

    Three statements whatever the number of lost attempts: the two reads (expired leases, then
    ``start_to_close`` timeouts) and one :data:`~gnomon.common.storage.failing.FAIL_MANY` for the
    batch, the shape of River's ``JobGetStuck`` + ``JobRescueMany``."""
    lost = [
        (r, LOST_ERROR)
        for r in (await conn.execute(expired_leases_stmt(region, skew_margin_s, limit))).mappings()
    ]
    # start_to_close: an attempt running longer than its job allows is timed out the same way (its
    # worker may still be running it, so the outcome is just as unknown)
    seen = {(r["job_id"], r["attempt"]) for r, _ in lost}
    rows = (await conn.execute(timed_out_stmt(region, skew_margin_s, max(0, limit - len(lost))))).mappings()
    lost += [(r, TIMEOUT_ERROR) for r in rows if (r["job_id"], r["attempt"]) not in seen]
    failures = [_lost(r, error, retry_delay_s) for r, error in lost]
    traces = {(r["job_id"], r["attempt"]): r["trace_context"] for r, _ in lost}
    errors = {(f.job_id, f.attempt): f.error for f in failures}
    return [
        Reaped(j, a, JobState(state), namespace, queue, errors[(j, a)], traces[(j, a)])
        for j, a, state, namespace, queue in await fail_many(conn, failures)
        if state is not None  # None: the job moved on already (e.g. a late result landed)
    ]


def _lost(row: Any, error: str, retry_delay_s: Callable[[int], float] | None) -> Failure:
    """The :class:`~gnomon.common.storage.failing.Failure` of one lost attempt ``row`` (of
    :data:`_LOST_COLS`): LOST, AMBIGUOUS, judged when its job is still at that attempt."""
    attempt = row["attempt"]
    outcome = None
    if row["current"] is not None:
        delay = None if retry_delay_s is None else retry_delay_s(attempt)
        outcome = judge(row, attempt, FailureClass.AMBIGUOUS, error, delay_override_s=delay)
    return Failure(
        row["job_id"],
        attempt,
        row["token"],
        row["version"],
        AttemptState.LOST,
        FailureClass.AMBIGUOUS,
        error,
        outcome,
    )


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
