"""Results of attempts: a worker's success or failure (:func:`complete`).

Worker writes are compare-and-set on the attempt row: ``(job_id, attempt, token)`` must match, so a
stale result changes nothing. What happens to the job after a failure is decided by the pure
:func:`gnomon.common.domain.transitions.after_failure` (retry or DEAD) and written for the whole
batch in one statement, :data:`gnomon.common.storage.failing.FAIL_MANY`, which also holds the cancel
rule (a job with a cancellation request is never retried). All instants are the database's ``now()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import BigInteger, Integer, Select, String, Uuid, bindparam, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.attempts import AttemptId, Result
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.domain.transitions import AfterFailure
from gnomon.common.storage import raw
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.failing import JUDGE_COLS, Failure, fail_many, judge
from gnomon.common.storage.job_view import RUNNING_ROW, UNSTEPPED
from gnomon.common.storage.leases import key_params, still_running
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import builder, named

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
    .where(*still_running(_V3))
    .values(state=bindparam("p_state", type_=String), finished_at=func.now())
    .returning(attempts.c.job_id, attempts.c.attempt),
)
FAILED_JOBS = named(
    __name__,
    "FAILED_JOBS",
    """The jobs of the failed attempts ``(p_job_id, p_attempt)`` (arrays) still running at that
    attempt (row RUNNING, or QUEUED: :data:`gnomon.common.storage.job_view.RUNNING_ROW`): ``id``, ``attempt``, ``max_attempts``, ``idempotent``, the retry policy columns and
    ``age_s``, the seconds since their first dispatch (database clock).""",
    select(jobs.c.id, jobs.c.attempt, *JUDGE_COLS).where(
        jobs.c.id == _P.c.job_id, jobs.c.attempt == _P.c.attempt, RUNNING_ROW
    ),
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
    UPDATE itself, :data:`gnomon.common.storage.failing.FAIL_MANY`). A batch of failures costs two
    statements whatever its size.
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
        applied.update(await _fail(conn, [by_key[k] for k in fail_keys], retry_delay_s, dead))
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


async def _fail(
    conn: AsyncConnection,
    results: list[Result],
    retry_delay_s: Callable[[Result, int], float] | None,
    dead: list[tuple[str, str, str]] | None,
) -> list[AttemptId]:
    """The failures ``results`` in two statements whatever their number: their jobs read
    (:data:`FAILED_JOBS`), judged, and one :data:`gnomon.common.storage.failing.FAIL_MANY` (the
    compare-and-set on each attempt and the write of each job). Returns the attempts moved to
    FAILED; appends ``(namespace, queue, failure_class)`` of each job made DEAD to ``dead``."""
    p = row_params("p", job_id=[r.key.job_id for r in results], attempt=[r.key.attempt for r in results])
    rows = {
        AttemptId(j["id"], j["attempt"]): j for j in (await conn.execute(FAILED_JOBS, p)).mappings().all()
    }
    failures = []
    for r in results:
        k, job = r.key.id, rows.get(r.key.id)
        outcome = None
        if job is not None:
            outcome = judge(job, k.attempt, r.failure_class, r.error, retry_after_s=r.retry_after_s)
            if outcome.retry and retry_delay_s is not None:
                outcome = AfterFailure(outcome.state, retry_delay_s(r, k.attempt), outcome.reason)
        failures.append(
            Failure(
                k.job_id,
                k.attempt,
                r.key.token,
                r.key.version,
                AttemptState.FAILED,
                r.failure_class,
                r.error,
                outcome,
                owner=r.owner,
                worker=r.worker_id,
            )
        )
    index = {AttemptId(f.job_id, f.attempt): i for i, f in enumerate(failures)}
    got = []
    for job_id, attempt, state, namespace, queue in await fail_many(conn, failures):
        got.append(AttemptId(job_id, attempt))
        if dead is not None and state == JobState.DEAD:
            dead.append((namespace, queue, str(failures[index[AttemptId(job_id, attempt)]].failure_class)))
    return got
