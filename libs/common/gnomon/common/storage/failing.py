"""The after-failure write of a whole batch in one statement: failed results
(:func:`gnomon.common.storage.results.complete`) and lost leases
(:func:`gnomon.common.storage.reaping.reap_lost_leases`).

Each batch is read once (the attempts and the job columns the judgement needs,
:func:`judged_rows`), judged in Python (:func:`judge`: the pure
:func:`gnomon.common.domain.transitions.after_failure`, retry with backoff or DEAD), and written
with :data:`FAIL_MANY`: one statement whose first CTE moves the attempts out of RUNNING under a
compare-and-set on ``(job_id, attempt, token, version)`` (and the accepting worker, when given), and
whose second writes the jobs of the attempts it moved. The shape is River's ``JobRescueMany`` and
``JobSetStateIfRunningMany`` (riverqueue/river, ``riverdriver/riverpgxv5/internal/dbsqlc/river_job.sql``): the
client decides each job's next state, one ``UPDATE ... FROM unnest(...)`` writes them all.

The cancel rule (a job with a cancellation request is never retried: any failure ends it CANCELLED)
is coded once, here: the ``CASE`` on ``jobs.cancel_requested_at`` in :data:`FAIL_MANY`, evaluated by
the database on the row as the UPDATE finds it, under the row lock the UPDATE takes, so a cancel
committed between the read and the write is not lost. All instants are the database's ``now()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, Integer, String, Uuid, case, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.jobs import policy_of
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.domain.transitions import AfterFailure, after_failure
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.job_view import RUNNING_ROW, UNSTEPPED
from gnomon.common.storage.jobs import POLICY_COLS
from gnomon.common.storage.leases import still_running
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import named

#: Longest error text stored on an attempt or job row, characters.
MAX_ERROR_CHARS = 4096

#: The job columns :func:`judge` reads (select them beside the attempt's key).
JUDGE_COLS = (
    jobs.c.max_attempts,
    jobs.c.idempotent,
    *POLICY_COLS,
    func.extract("epoch", func.now() - jobs.c.first_dispatched_at).label("age_s"),
)


@dataclass(frozen=True)
class Failure:
    """One attempt to move out of RUNNING and the judgement to write on its job.

    ``token``/``version``: the compare-and-set on the attempt row; ``owner``/``worker``: the
    accepting worker identity a result must match (``owner`` None = unchecked, the reaper);
    ``attempt_state``: FAILED (a worker's result) or LOST (the reaper); ``error`` is cut to
    :data:`MAX_ERROR_CHARS`; ``outcome``: the judgement (None: the job has moved on, only the attempt
    is written)."""

    job_id: Any
    attempt: int
    token: int
    version: int
    attempt_state: AttemptState
    failure_class: str
    error: str
    outcome: AfterFailure | None
    owner: str | None = None
    worker: str | None = None


_V = unnest_rows(
    "v",
    job_id=Uuid,
    attempt=Integer,
    token=BigInteger,
    version=BigInteger,
    owner=String,
    worker=String,
    attempt_state=String,
    failure_class=String,
    error=String,
    job_state=String,
    retry=Boolean,
    delay_s=Float,
)


def _build_fail_many() -> Any:
    v = select(_V).cte("v")
    moved = (
        update(attempts)
        .where(*still_running(v))
        .values(
            state=v.c.attempt_state, finished_at=func.now(), failure_class=v.c.failure_class, error=v.c.error
        )
        .returning(attempts.c.job_id, attempts.c.attempt, attempts.c.accepted_at)
        .cte("moved")
    )
    cancelled = jobs.c.cancel_requested_at.is_not(None)
    written = (
        update(jobs)
        .where(
            jobs.c.id == moved.c.job_id,
            jobs.c.attempt == moved.c.attempt,
            RUNNING_ROW,
            v.c.job_id == moved.c.job_id,
            v.c.attempt == moved.c.attempt,
            v.c.job_state.is_not(None),
        )
        .values(
            # a cancel request wins over every outcome
            state=case((cancelled, JobState.CANCELLED.value), else_=v.c.job_state),
            version=jobs.c.version + 1 + UNSTEPPED,
            started_at=func.coalesce(moved.c.accepted_at, jobs.c.started_at),
            last_error=v.c.error,
            failure_class=v.c.failure_class,
            scheduled_at=case(
                (cancelled, jobs.c.scheduled_at),
                (v.c.retry, func.now() + v.c.delay_s * timedelta(seconds=1)),
                else_=jobs.c.scheduled_at,
            ),
            finished_at=case((cancelled, func.now()), (v.c.retry, jobs.c.finished_at), else_=func.now()),
        )
        .returning(jobs.c.id, jobs.c.attempt, jobs.c.state, jobs.c.namespace, jobs.c.queue)
        .cte("written")
    )
    return select(
        moved.c.job_id, moved.c.attempt, written.c.state, written.c.namespace, written.c.queue
    ).select_from(
        moved.outerjoin(written, (written.c.id == moved.c.job_id) & (written.c.attempt == moved.c.attempt))
    )


FAIL_MANY = named(
    __name__,
    "FAIL_MANY",
    """One statement for a batch of failures (arrays ``v_*``, one element per attempt; see
    :class:`Failure`): attempts ``(v_job_id, v_attempt)`` still RUNNING under ``v_token`` and
    ``v_version`` and accepted by worker ``v_worker`` of ``v_owner`` (NULL: any) -> ``v_attempt_state``
    (FAILED or LOST), ``finished_at = now()``, ``v_failure_class``, ``v_error``; then the jobs of the
    attempts moved that are still running at that attempt (row RUNNING, or QUEUED:
    :mod:`gnomon.common.storage.job_view`) and have a judgement (``v_job_state`` not NULL): version + 1
    as a client saw it, ``started_at`` = the attempt's ``accepted_at``, ``last_error``,
    ``failure_class``, and ``v_job_state``: a retry (``v_retry``) is SCHEDULED at ``now() +
    v_delay_s`` seconds, DEAD gets ``finished_at = now()``; unless the row carries a cancellation
    request when the UPDATE finds it: then CANCELLED (``finished_at = now()``, ``scheduled_at``
    kept). Returns ``(job_id, attempt, state, namespace, queue)`` per attempt moved; the job columns
    are NULL when its job was not written (it moved on).""",
    _build_fail_many(),
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
    dispatch, database clock, or None): :data:`JUDGE_COLS`. The cancellation request is left to
    :data:`FAIL_MANY`."""
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


def fail_params(failures: Sequence[Failure]) -> dict[str, list[Any]]:
    """The ``v_*`` array parameters of :data:`FAIL_MANY` for ``failures``."""
    outs = [f.outcome for f in failures]
    return row_params(
        "v",
        job_id=[f.job_id for f in failures],
        attempt=[f.attempt for f in failures],
        token=[f.token for f in failures],
        version=[f.version for f in failures],
        owner=[f.owner for f in failures],
        worker=[f.worker for f in failures],
        attempt_state=[f.attempt_state.value for f in failures],
        failure_class=[str(f.failure_class) for f in failures],
        error=[f.error[:MAX_ERROR_CHARS] for f in failures],
        job_state=[None if o is None else o.state.value for o in outs],
        retry=[o is not None and o.retry for o in outs],
        delay_s=[None if o is None or not o.retry else float(o.delay_s or 0.0) for o in outs],
    )


async def fail_many(conn: AsyncConnection, failures: Sequence[Failure]) -> list[tuple[Any, ...]]:
    """Writes ``failures`` with :data:`FAIL_MANY` (one statement, none for an empty batch); returns
    its rows ``(job_id, attempt, state, namespace, queue)``, one per attempt moved out of RUNNING
    (the job columns None when the job was not written)."""
    if not failures:
        return []
    return [tuple(r) for r in (await conn.execute(FAIL_MANY, fail_params(failures))).all()]
