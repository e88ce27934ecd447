"""Named queries for cancelling and rescheduling jobs (the job lifecycle: docs/concepts.md).

Every change is a compare-and-set on the job row: ``UPDATE jobs ... WHERE id = :id AND state = :s
AND version = :v``, bumping ``version`` (states and versions as a client sees them: a running
job's row may read QUEUED, :mod:`gnomon.common.storage.job_view`). The current row is read first (no lock); if a concurrent
transition (a claim, an accept, a result, the reaper) moves the row between the read and the
update, the update changes nothing and the request is decided again from a fresh read, once. If
that second compare-and-set loses too, a last read decides what to report: a terminal job is
``ALREADY_FINISHED`` (cancel) or ``JOB_NOT_RESCHEDULABLE`` (reschedule), anything else is
:class:`Aborted` (CONCURRENT_MODIFICATION) and nothing is written. So a cancel never produces a
transition outside :data:`gnomon.common.domain.states.TRANSITIONS`, whatever it races with:

* SCHEDULED -> CANCELLED: a later claim finds no SCHEDULED row.
* QUEUED -> CANCELLED: the QUEUED attempt is locked first, then the job's compare-and-set, then the
  attempt row goes ``CANCELLED`` (it leaves the outbox, which is the QUEUED attempts), so the relay
  never re-delivers it; a worker's accept of a message already in flight is refused by the accept's
  own compare-and-set (attempt no longer QUEUED). The accept writes only the attempt
  (:mod:`gnomon.common.storage.job_view`), so the lock is what keeps it from committing between
  the job's CANCELLED and the attempt's: if the attempt is no longer QUEUED when locked, it was
  accepted and the cancel is decided again (RUNNING).
* RUNNING (the state a client sees: the row RUNNING, or QUEUED with the current attempt RUNNING):
  ``jobs.cancel_requested_at`` and ``attempts.cancel_requested`` are set; the state stays
  RUNNING. Heartbeat acks and the dispatcher's push (``gnomon.dispatcher.cancels``) tell the
  worker; :func:`gnomon.common.storage.results.complete` then ends the job SUCCEEDED (a success)
  or CANCELLED (any failure, never retried), and the reaper ends it CANCELLED if the lease is lost.

Lock order matches the writers a cancel can race with, so they do not deadlock: attempt then job
for a QUEUED and for a RUNNING job (as a result and the reaper do; the accept locks only the
attempt). Deadlocks that remain possible are retried by ``run_transaction`` (40P01).

All instants come from the database clock. Functions take a connection inside a transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Integer, Uuid, bindparam, func, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import TERMINAL, AttemptState, CancelOutcome, JobState
from gnomon.common.errors import Aborted, FailedPrecondition, FieldViolation, InvalidArgument
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.job_view import RUNNING_ROW, UNSTEPPED
from gnomon.common.storage.jobs import get_job
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import named

#: Compare-and-set attempts per request (the first and one retry).
CAS_TRIES = 2

_ID = bindparam("p_id", type_=Uuid)
_VERSION = bindparam("p_version", type_=BigInteger)
_ATTEMPT = bindparam("p_attempt", type_=Integer)

CANCEL_UNSTARTED = named(
    __name__,
    "CANCEL_UNSTARTED",
    """SCHEDULED or QUEUED (``p_state``) at ``p_version`` -> CANCELLED.""",
    update(jobs)
    .where(jobs.c.id == _ID, jobs.c.state == bindparam("p_state"), jobs.c.version == _VERSION)
    .values(state=JobState.CANCELLED, version=jobs.c.version + 1, finished_at=func.now())
    .returning(*jobs.c),
)
CANCEL_QUEUED_ATTEMPT = named(
    __name__,
    "CANCEL_QUEUED_ATTEMPT",
    """The QUEUED attempt of a cancelled job -> CANCELLED (never accepted, never re-delivered).""",
    update(attempts)
    .where(attempts.c.job_id == _ID, attempts.c.attempt == _ATTEMPT, attempts.c.state == AttemptState.QUEUED)
    .values(state=AttemptState.CANCELLED, finished_at=func.now()),
)
LOCK_QUEUED_ATTEMPT = named(
    __name__,
    "LOCK_QUEUED_ATTEMPT",
    """Locks the QUEUED attempt ``p_attempt`` of job ``p_id`` before the job row, so an accept (which
    writes only the attempt) cannot commit between the job's compare-and-set and the attempt's
    CANCELLED; no row: the attempt was accepted meanwhile (or is gone).""",
    select(attempts.c.attempt)
    .where(attempts.c.job_id == _ID, attempts.c.attempt == _ATTEMPT, attempts.c.state == AttemptState.QUEUED)
    .with_for_update(),
)
LOCK_RUNNING_ATTEMPT = named(
    __name__,
    "LOCK_RUNNING_ATTEMPT",
    """Locks the RUNNING attempt before the job row (the order of ``complete()`` and the reaper).""",
    select(attempts.c.attempt)
    .where(attempts.c.job_id == _ID, attempts.c.attempt == _ATTEMPT, attempts.c.state == AttemptState.RUNNING)
    .with_for_update(),
)
REQUEST_CANCEL = named(
    __name__,
    "REQUEST_CANCEL",
    """Running at ``p_attempt`` (row RUNNING, or QUEUED with that attempt RUNNING, locked by the
    caller: :mod:`gnomon.common.storage.job_view`) at the version a client sees, ``p_version`` (the
    stored version + 1 on a QUEUED row): record the cancellation request, stored version + 1.""",
    update(jobs)
    .where(
        jobs.c.id == _ID,
        RUNNING_ROW,
        jobs.c.version + UNSTEPPED == _VERSION,
        jobs.c.attempt == _ATTEMPT,
    )
    .values(cancel_requested_at=func.now(), version=jobs.c.version + 1)
    .returning(jobs.c.id),
)
FLAG_ATTEMPT = named(
    __name__,
    "FLAG_ATTEMPT",
    """Flags the running attempt, so heartbeat acks and the dispatcher push carry ``cancel_requested``.""",
    update(attempts)
    .where(attempts.c.job_id == _ID, attempts.c.attempt == _ATTEMPT, attempts.c.state == AttemptState.RUNNING)
    .values(cancel_requested=True),
)
RESCHEDULE = named(
    __name__,
    "RESCHEDULE",
    """SCHEDULED at ``p_version``: a new ``scheduled_at``.""",
    update(jobs)
    .where(jobs.c.id == _ID, jobs.c.state == JobState.SCHEDULED, jobs.c.version == _VERSION)
    .values(scheduled_at=bindparam("p_at", type_=jobs.c.scheduled_at.type), version=jobs.c.version + 1)
    .returning(*jobs.c),
)


@dataclass(frozen=True)
class CancelResult:
    """What :func:`cancel_job` did (a :class:`~gnomon.common.domain.states.CancelOutcome`) and the job
    row afterwards."""

    outcome: CancelOutcome
    job: dict[str, Any]


@dataclass(frozen=True)
class Rescheduled:
    """The job row after :func:`reschedule_job` and the database clock's ``now()`` of that
    transaction (UTC), e.g. to decide whether the new time is near."""

    job: dict[str, Any]
    db_now: datetime


def _check_version(row: dict[str, Any], expected_version: int | None) -> None:
    if expected_version is not None and row["version"] != expected_version:
        raise FailedPrecondition(
            f"job is at version {row['version']} ({row['state']}), not {expected_version}; nothing was changed",
            reason=ErrorReason.STALE_VERSION,
            metadata={"version": str(row["version"]), "state": row["state"]},
        )


def _lost_race(row: dict[str, Any]) -> Aborted:
    return Aborted(
        f"job changed concurrently (now {row['state']} at version {row['version']}); read it and retry",
        metadata={"version": str(row["version"]), "state": row["state"]},
    )


async def cancel_job(
    conn: AsyncConnection, namespace: str, job_id: uuid.UUID, *, expected_version: int | None = None
) -> CancelResult:
    """Cancels job ``job_id`` of ``namespace`` (see the module docstring for each state).

    Outcomes (:class:`~gnomon.common.domain.states.CancelOutcome`): SCHEDULED/QUEUED -> ``CANCELLED``
    (version + 1, ``finished_at`` = now); RUNNING -> ``CANCEL_REQUESTED`` (version + 1 the first time;
    a repeat changes nothing); terminal -> ``ALREADY_FINISHED`` (nothing changes).

    Raises :class:`NotFound` (JOB_NOT_FOUND); :class:`FailedPrecondition` with reason STALE_VERSION
    if ``expected_version`` is given and differs from the current version (checked before anything
    else, also for a terminal job; nothing is written); :class:`Aborted` (CONCURRENT_MODIFICATION)
    if two compare-and-sets in a row lost to concurrent transitions.
    """
    tries = 0
    while True:
        row = await get_job(conn, namespace, job_id)
        _check_version(row, expected_version)
        state = row["state"]
        if state in TERMINAL:
            return CancelResult(CancelOutcome.ALREADY_FINISHED, row)
        if state == JobState.RUNNING and row["cancel_requested_at"] is not None:
            return CancelResult(CancelOutcome.CANCEL_REQUESTED, row)
        if tries == CAS_TRIES:
            raise _lost_race(row)
        tries += 1
        params = {"p_id": job_id, "p_version": row["version"], "p_attempt": row["attempt"]}
        if state in (JobState.SCHEDULED, JobState.QUEUED):
            if state == JobState.QUEUED and (await conn.execute(LOCK_QUEUED_ATTEMPT, params)).first() is None:
                continue  # accepted meanwhile (the accept writes only the attempt): read again
            new = (await conn.execute(CANCEL_UNSTARTED, {**params, "p_state": state})).mappings().first()
            if new is None:
                continue
            if state == JobState.QUEUED:
                await conn.execute(CANCEL_QUEUED_ATTEMPT, params)
            return CancelResult(CancelOutcome.CANCELLED, dict(new))
        if state == JobState.RUNNING:
            if (await conn.execute(LOCK_RUNNING_ATTEMPT, params)).first() is None:
                continue  # the attempt ended meanwhile: decide again from a fresh read
            if (await conn.execute(REQUEST_CANCEL, params)).first() is None:
                continue
            await conn.execute(FLAG_ATTEMPT, params)
            # read back as a client sees it (the state and version derived from the attempt)
            return CancelResult(CancelOutcome.CANCEL_REQUESTED, await get_job(conn, namespace, job_id))
        raise ValueError(f"job {job_id} is in unknown state {state!r}")


DB_NOW = named(
    __name__,
    "DB_NOW",
    """Reads the database clock: ``now()``, the transaction's start instant (timestamptz).""",
    select(func.now()),
)


async def reschedule_job(
    conn: AsyncConnection,
    namespace: str,
    job_id: uuid.UUID,
    *,
    schedule_at: datetime | None,
    delay: timedelta | None,
    expected_version: int | None = None,
) -> Rescheduled:
    """Moves the ``scheduled_at`` of a SCHEDULED job to ``schedule_at`` (UTC instant) or to
    ``now() + delay`` (database clock); neither means now. Version + 1.

    Raises :class:`NotFound` (JOB_NOT_FOUND); :class:`FailedPrecondition` with reason STALE_VERSION
    (``expected_version`` given and different) or JOB_NOT_RESCHEDULABLE (the job is not SCHEDULED:
    already dispatched, running or finished; metadata ``state``); :class:`InvalidArgument` if the
    job's deadline is not after the new time (field ``delay`` when a delay was given, else
    ``schedule_time``); :class:`Aborted` (CONCURRENT_MODIFICATION) if two compare-and-sets in a row
    lost. Nothing is written when it raises.
    """
    db_now = (await conn.execute(DB_NOW)).scalar_one()  # constant within the transaction
    due = schedule_at if schedule_at is not None else db_now + (delay or timedelta(0))
    tries = 0
    while True:
        row = await get_job(conn, namespace, job_id)
        _check_version(row, expected_version)
        if row["state"] != JobState.SCHEDULED:
            raise FailedPrecondition(
                f"job is {row['state']}: only a job not yet dispatched (SCHEDULED) can be rescheduled",
                reason=ErrorReason.JOB_NOT_RESCHEDULABLE,
                metadata={"state": row["state"], "version": str(row["version"])},
            )
        if row["deadline"] is not None and row["deadline"] <= due:
            raise InvalidArgument(
                [
                    FieldViolation(
                        "delay" if delay is not None else "schedule_time", "must be before the job's deadline"
                    )
                ]
            )
        if tries == CAS_TRIES:
            raise _lost_race(row)
        tries += 1
        new = (
            (await conn.execute(RESCHEDULE, {"p_id": job_id, "p_version": row["version"], "p_at": due}))
            .mappings()
            .first()
        )
        if new is not None:
            return Rescheduled(dict(new), db_now)


_K = unnest_rows("k", job_id=Uuid, attempt=Integer)
CANCEL_REQUESTED_ATTEMPTS = named(
    __name__,
    "CANCEL_REQUESTED_ATTEMPTS",
    """Which of the given attempts are RUNNING with a cancellation request (primary-key lookups).""",
    select(attempts.c.job_id, attempts.c.attempt).where(
        attempts.c.job_id == _K.c.job_id,
        attempts.c.attempt == _K.c.attempt,
        attempts.c.state == AttemptState.RUNNING,
        attempts.c.cancel_requested == true(),
    ),
)


async def cancel_requested_attempts(
    conn: AsyncConnection, keys: list[tuple[uuid.UUID, int]]
) -> set[tuple[uuid.UUID, int]]:
    """The subset of ``keys`` (``(job_id, attempt)``) that are RUNNING and whose cancellation was
    requested. One statement; cost grows with ``len(keys)`` (primary-key lookups), not the table."""
    if not keys:
        return set()
    rows = (
        await conn.execute(
            CANCEL_REQUESTED_ATTEMPTS,
            row_params("k", job_id=[k[0] for k in keys], attempt=[k[1] for k in keys]),
        )
    ).all()
    return {(r[0], r[1]) for r in rows}
