"""Results of attempts: a worker's success or failure (:func:`complete`), and the one write of the
after-failure transition (:func:`fail_job_stmt`) that the reaper uses too.

Worker writes are compare-and-set on the attempt row: ``(job_id, attempt, token)`` must match, so a
stale result changes nothing. What happens to the job after a failure is decided by the pure
:func:`gnomon.common.domain.transitions.after_failure` (retry or DEAD). The cancel rule (a job with a
cancellation request is never retried: any failure ends it CANCELLED) is coded once, here: the
``CASE`` on ``jobs.cancel_requested_at`` in :func:`fail_job_stmt`, evaluated by the database on the
row as the UPDATE finds it, under the row lock the UPDATE takes, so a cancel committed between the
read and the write is not lost. All instants are the database's ``now()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Select,
    String,
    Update,
    Uuid,
    bindparam,
    case,
    func,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.attempts import AttemptId, Result
from gnomon.common.domain.failures import RetryReason
from gnomon.common.domain.jobs import policy_of
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.domain.transitions import AfterFailure, after_failure
from gnomon.common.storage import raw
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.job_view import RUNNING_ROW, UNSTEPPED
from gnomon.common.storage.jobs import POLICY_COLS
from gnomon.common.storage.leases import key_params, owned_by
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import builder, named

#: Longest error text stored on an attempt or job row, characters.
MAX_ERROR_CHARS = 4096

_P = unnest_rows("p", job_id=Uuid, attempt=Integer)
_V3 = unnest_rows(
    "v", job_id=Uuid, attempt=Integer, token=BigInteger, version=BigInteger, owner=String, worker=String
)

FINISH_ATTEMPTS = named(
    __name__,
    "FINISH_ATTEMPTS",
    """Attempts ``(v_job_id, v_attempt, v_token, v_version, v_owner)`` (arrays) still RUNNING under
    that token and version and accepted by worker ``v_worker`` of ``v_owner`` (NULL: any) -> state ``p_state``
    (SUCCEEDED or FAILED), ``finished_at = now()``; returns their ``(job_id, attempt)``.""",
    update(attempts)
    .where(
        attempts.c.job_id == _V3.c.job_id,
        attempts.c.attempt == _V3.c.attempt,
        attempts.c.token == _V3.c.token,
        attempts.c.version == _V3.c.version,
        owned_by(_V3.c.owner, _V3.c.worker),
        attempts.c.state == AttemptState.RUNNING,
    )
    .values(state=bindparam("p_state", type_=String), finished_at=func.now())
    .returning(attempts.c.job_id, attempts.c.attempt),
)
FAILED_JOBS = named(
    __name__,
    "FAILED_JOBS",
    """The jobs of the failed attempts ``(p_job_id, p_attempt)`` (arrays) still running at that
    attempt (row RUNNING, or QUEUED: :data:`gnomon.common.storage.job_view.RUNNING_ROW`): ``id``, ``attempt``, ``max_attempts``, ``idempotent``, the retry policy columns and
    ``age_s``, the seconds since their first dispatch (database clock).""",
    select(
        jobs.c.id,
        jobs.c.attempt,
        jobs.c.max_attempts,
        jobs.c.idempotent,
        *POLICY_COLS,
        func.extract("epoch", func.now() - jobs.c.first_dispatched_at).label("age_s"),
    ).where(jobs.c.id == _P.c.job_id, jobs.c.attempt == _P.c.attempt, RUNNING_ROW),
)
SUCCEED_JOBS = named(
    __name__,
    "SUCCEED_JOBS",
    """The jobs of the finished attempts ``(p_job_id, p_attempt)`` (arrays) still running at that
    attempt (row RUNNING, or QUEUED with the attempt accepted: :mod:`gnomon.common.storage.job_view`)
    -> SUCCEEDED: version + 1 as a client saw it (the stored version + 2 on a QUEUED row),
    ``started_at`` = the attempt's ``accepted_at`` (kept on a RUNNING row), ``finished_at = now()``,
    ``last_error`` cleared.""",
    update(jobs)
    .where(
        jobs.c.id == _P.c.job_id,
        jobs.c.attempt == _P.c.attempt,
        RUNNING_ROW,
        attempts.c.job_id == jobs.c.id,
        attempts.c.attempt == jobs.c.attempt,
    )
    .values(
        state=JobState.SUCCEEDED,
        version=jobs.c.version + 1 + UNSTEPPED,
        started_at=func.coalesce(attempts.c.accepted_at, jobs.c.started_at),
        finished_at=func.now(),
        last_error=None,
    ),
)

_SAMPLE = AttemptId(uuid.UUID(int=1), 1)


@builder(job_id=_SAMPLE.job_id, attempt=1, failure_class="TRANSIENT", error="e")
def attempt_failure_stmt(job_id: uuid.UUID, attempt: int, failure_class: str, error: str) -> Update:
    """Records ``failure_class`` and ``error`` (at most :data:`MAX_ERROR_CHARS`) on attempt
    ``(job_id, attempt)``."""
    return (
        update(attempts)
        .where(attempts.c.job_id == job_id, attempts.c.attempt == attempt)
        .values(failure_class=failure_class, error=error[:MAX_ERROR_CHARS])
    )


@builder(
    job_id=_SAMPLE.job_id,
    attempt=1,
    outcome=AfterFailure(JobState.SCHEDULED, 1.5, RetryReason.BACKOFF),
    failure_class="TRANSIENT",
    error="e",
)
def fail_job_stmt(
    job_id: uuid.UUID, attempt: int, outcome: AfterFailure, *, failure_class: str, error: str
) -> Update:
    """The write of the after-failure transition on job ``job_id`` still running at ``attempt`` (row
    RUNNING, or QUEUED with that attempt accepted: :mod:`gnomon.common.storage.job_view`; the caller
    has just moved the attempt out of RUNNING): version + 1 as a client saw it (the stored version
    + 2 on a QUEUED row), ``started_at`` = the attempt's ``accepted_at``, ``last_error`` (at most :data:`MAX_ERROR_CHARS`), ``failure_class``, and the state
    of ``outcome`` (a retry: SCHEDULED at ``now() + outcome.delay_s`` seconds; else DEAD with
    ``finished_at = now()``), unless the row carries a cancellation request when the UPDATE finds
    it: then CANCELLED (``finished_at = now()``, ``scheduled_at`` kept), whatever ``outcome`` says.
    This ``CASE`` is the only place the cancel rule is coded (the pure judgement does not take a
    cancellation into account); the database evaluates it under the row lock the UPDATE holds.
    Returns the state written, the job's namespace and queue."""
    cancelled = jobs.c.cancel_requested_at.is_not(None)
    on_cancel = JobState.CANCELLED  # a cancel request wins over every outcome
    values: dict[str, Any] = dict(
        version=jobs.c.version + 1 + UNSTEPPED,
        started_at=func.coalesce(attempts.c.accepted_at, jobs.c.started_at),
        last_error=error[:MAX_ERROR_CHARS],
        failure_class=failure_class,
    )
    if outcome.retry:
        values.update(
            state=case((cancelled, on_cancel), else_=outcome.state),
            scheduled_at=case(
                (cancelled, jobs.c.scheduled_at),
                else_=func.now() + timedelta(seconds=outcome.delay_s or 0.0),
            ),
            finished_at=case((cancelled, func.now()), else_=jobs.c.finished_at),
        )
    else:
        values.update(state=case((cancelled, on_cancel), else_=outcome.state), finished_at=func.now())
    return (
        update(jobs)
        .where(
            jobs.c.id == job_id,
            jobs.c.attempt == attempt,
            RUNNING_ROW,
            attempts.c.job_id == jobs.c.id,
            attempts.c.attempt == jobs.c.attempt,
        )
        .values(**values)
        .returning(jobs.c.state, jobs.c.namespace, jobs.c.queue)
    )


def judge(
    job: Mapping[Any, Any],
    attempt: int,
    failure_class: str,
    error: str,
    *,
    retry_after_s: float = 0.0,
    delay_override_s: float | None = None,
) -> AfterFailure:
    """:func:`~gnomon.common.domain.transitions.after_failure` for a job row holding
    ``max_attempts``, ``idempotent``, the retry policy columns and ``age_s`` (seconds since the first
    dispatch, database clock, or None). The cancellation request is left to :func:`fail_job_stmt`."""
    return after_failure(
        failure_class,
        error=error,
        attempt=attempt,
        max_attempts=job["max_attempts"],
        idempotent=job["idempotent"],
        policy=policy_of(job),
        age_s=None if job["age_s"] is None else float(job["age_s"]),
        retry_after_s=retry_after_s,
        delay_override_s=delay_override_s,
    )


def _finish_params(results: list[Result]) -> dict[str, list[Any]]:
    return key_params(
        "v", [r.key for r in results], with_version=True, owners=[(r.owner, r.worker_id) for r in results]
    )


@builder(keys=[_SAMPLE])
def current_attempts_stmt(keys: list[AttemptId]) -> Select[tuple[Any, ...]]:
    """``(job_id, attempt, token, state, owner, worker_id)`` of the attempts ``keys`` (why a result
    was not applied)."""
    return select(
        attempts.c.job_id,
        attempts.c.attempt,
        attempts.c.token,
        attempts.c.state,
        attempts.c.owner,
        attempts.c.worker_id,
    ).where(tuple_(attempts.c.job_id, attempts.c.attempt).in_(keys))


async def complete(
    conn: AsyncConnection,
    results: list[Result],
    *,
    retry_delay_s: Callable[[Result, int], float] | None = None,
    dead: list[tuple[str, str, str]] | None = None,
) -> dict[AttemptId, str]:
    """Applies results; returns ``(job_id, attempt) -> ""`` when applied (or already applied with the
    same token: completion is idempotent per (job, attempt, token)) or the refusal reason
    (STALE_FENCING_TOKEN, STALE_ATTEMPT). A result whose ``owner`` is set and is not the attempt's
    accepting worker identity (``owner`` and ``worker_id``) is refused STALE_ATTEMPT whatever the
    attempt's token or state, like a result for no attempt at all.

    Success: attempt and job -> SUCCEEDED. Failure: attempt -> FAILED; the after-failure transition
    (:func:`gnomon.common.domain.transitions.after_failure`: failure class, non-retryable error types,
    attempts left, ``max_age`` since ``first_dispatched_at``) decides: the job goes back to SCHEDULED
    at ``now() + delay`` (jittered backoff, or a THROTTLED ``retry_after``), else -> DEAD.
    ``retry_delay_s(result, attempt)`` (seconds), when given, replaces the policy's delay (tests).
    ``dead``, when given, gets ``(namespace, queue, failure_class)`` of each job made DEAD (for
    ``gnomon_dead_letters_total``, counted by the caller once the transaction committed).

    After a cancellation request (``jobs.cancel_requested_at`` set, see
    :func:`gnomon.common.storage.cancel.cancel_job`) there is no retry: a success is still
    SUCCEEDED (the real outcome), a failure of any class makes the job CANCELLED (decided in the
    UPDATE itself, :func:`fail_job_stmt`).
    """
    if not results:
        return {}
    by_key = {r.key.id: r for r in results}
    ok_keys = [k for k, r in by_key.items() if r.succeeded]
    fail_keys = [k for k, r in by_key.items() if not r.succeeded]
    applied: set[AttemptId] = set()
    if ok_keys:
        params = {"p_state": AttemptState.SUCCEEDED, **_finish_params([by_key[k] for k in ok_keys])}
        got = [AttemptId(r[0], r[1]) for r in await raw.fetch(conn, FINISH_ATTEMPTS, params)]
        if got:
            await raw.fetch(
                conn, SUCCEED_JOBS, row_params("p", job_id=[x[0] for x in got], attempt=[x[1] for x in got])
            )
        applied.update(got)
    if fail_keys:
        params = {"p_state": AttemptState.FAILED, **_finish_params([by_key[k] for k in fail_keys])}
        got = [AttemptId(r[0], r[1]) for r in (await conn.execute(FINISH_ATTEMPTS, params)).all()]
        for k in got:
            r = by_key[k]
            await conn.execute(attempt_failure_stmt(k.job_id, k.attempt, r.failure_class, r.error))
        if got:
            p = row_params("p", job_id=[x[0] for x in got], attempt=[x[1] for x in got])
            for j in (await conn.execute(FAILED_JOBS, p)).mappings().all():
                k = AttemptId(j["id"], j["attempt"])
                r = by_key[k]
                outcome = judge(j, k.attempt, r.failure_class, r.error, retry_after_s=r.retry_after_s)
                if outcome.retry and retry_delay_s is not None:
                    outcome = AfterFailure(outcome.state, retry_delay_s(r, k.attempt), outcome.reason)
                written = (
                    await conn.execute(
                        fail_job_stmt(
                            k.job_id, k.attempt, outcome, failure_class=r.failure_class, error=r.error
                        )
                    )
                ).first()  # None: the job moved on meanwhile (nothing written, as before)
                if dead is not None and written is not None and written[0] == JobState.DEAD:
                    dead.append((written[1], written[2], r.failure_class))
        applied.update(got)
    out: dict[AttemptId, str] = {k: "" for k in by_key if k in applied}
    missing = [k for k in by_key if k not in applied]
    if missing:
        rows = (await conn.execute(current_attempts_stmt(missing))).all()
        cur = {AttemptId(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in rows}
        for k in missing:
            r = by_key[k]
            c = cur.get(k)
            want = AttemptState.SUCCEEDED if r.succeeded else AttemptState.FAILED
            if c is None or (r.owner is not None and (c[2], c[3]) != (r.owner, r.worker_id)):
                # not the caller's attempt: one answer whether it exists, and in whatever state (no
                # oracle for another worker's attempts)
                out[k] = ErrorReason.STALE_ATTEMPT
            elif c[0] != r.key.token:
                out[k] = ErrorReason.STALE_FENCING_TOKEN
            elif c[1] == want:
                out[k] = ""  # the same result again: idempotent
            else:
                out[k] = ErrorReason.STALE_ATTEMPT
    return {k: out[k] for k in by_key}
