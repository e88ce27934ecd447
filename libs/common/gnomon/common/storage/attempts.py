"""Named queries for the attempt history of a job (``JobService.ListJobAttempts``).

An attempt row is written by the claim (``QUEUED``), moved by the worker's accept (``RUNNING``)
and result (``SUCCEEDED``/``FAILED``), by the reaper (``LOST``) or by a cancellation
(``CANCELLED``); see :mod:`gnomon.common.storage.results`. Attempts carry no namespace column:
the history is read through the job row, so a caller only ever sees attempts of jobs in its own
namespace.

Bounded: a job has at most ``max_attempts`` (<= 100) attempts, and every read is keyed by the
``attempts`` primary key ``(job_id, attempt)`` with a ``LIMIT``.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Integer, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.errors import NotFound
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import named

#: Columns of one history entry (plus ``namespace`` of the job, for the resource name).
_HISTORY_COLS = (
    attempts.c.job_id,
    attempts.c.attempt,
    attempts.c.state,
    attempts.c.worker_id,
    attempts.c.dispatcher_id,
    attempts.c.token,
    attempts.c.version,
    attempts.c.failure_class,
    attempts.c.error,
    attempts.c.claimed_at,
    attempts.c.accepted_at,
    attempts.c.finished_at,
    attempts.c.lease_expires_at,
    attempts.c.cancel_requested,
    jobs.c.namespace,
)

LIST_ATTEMPTS = named(
    __name__,
    "LIST_ATTEMPTS",
    """Attempts of job ``p_job_id`` of namespace ``p_namespace`` numbered above ``p_after``, ascending,
    at most ``p_limit``: the history columns plus the job's ``namespace``.""",
    select(*_HISTORY_COLS)
    .select_from(attempts.join(jobs, jobs.c.id == attempts.c.job_id))
    .where(
        jobs.c.namespace == bindparam("p_namespace"),
        jobs.c.id == bindparam("p_job_id"),
        attempts.c.attempt > bindparam("p_after", type_=Integer),
    )
    .order_by(attempts.c.attempt)
    .limit(bindparam("p_limit", type_=Integer)),
)

JOB_EXISTS = named(
    __name__,
    "JOB_EXISTS",
    """The id of job ``p_job_id`` if it exists in namespace ``p_namespace`` (no row otherwise).""",
    select(jobs.c.id).where(jobs.c.namespace == bindparam("p_namespace"), jobs.c.id == bindparam("p_job_id")),
)


async def list_attempts(
    conn: AsyncConnection, namespace: str, job_id: uuid.UUID, *, after: int = 0, limit: int = 100
) -> list[dict[str, Any]]:
    """Up to ``limit`` attempts of the job, ascending by attempt number, those numbered above
    ``after`` only (the keyset cursor of the previous page). Each is a mapping of the ``attempts``
    columns plus ``namespace``.

    Raises :class:`NotFound` (JOB_NOT_FOUND) if the job does not exist in ``namespace``; a job that
    exists but was never claimed has an empty history.
    """
    params = {"p_namespace": namespace, "p_job_id": job_id, "p_after": after, "p_limit": limit}
    rows = [dict(r) for r in (await conn.execute(LIST_ATTEMPTS, params)).mappings()]
    if not rows and (await conn.execute(JOB_EXISTS, params)).first() is None:
        raise NotFound(f"job namespaces/{namespace}/jobs/{job_id} not found")
    return rows
