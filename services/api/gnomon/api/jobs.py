"""The job engine of the API: create, read, list, cancel and reschedule jobs, each one transaction
over the storage modules, and the dispatcher hint after a write that makes a job due soon. Knows
nothing of gRPC (:class:`gnomon.api.servicer.JobServicer` converts and calls it).

Rows are ``jobs`` / attempt-history rows as dicts (the storage modules' shape); instants are
UTC-aware datetimes. Errors are the storage modules': NOT_FOUND for an unknown job,
FAILED_PRECONDITION for a stale ``expected_version``, ALREADY_EXISTS for a reused request id or
idempotency key with another request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.api.validation import Reschedule
from gnomon.common.domain.jobs import NewJob
from gnomon.common.quotas import Admit
from gnomon.common.storage import attempts as attempts_store
from gnomon.common.storage import cancel as cancel_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage.engine import run_transaction

Row = dict[str, Any]


class JobEngine:
    """Job operations over ``engine``. ``wake_dispatchers(due)`` (None: no hints) is called after a
    write that makes a job due within ``prefetch_s`` seconds (the dispatchers' precise-timer window)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        wake_dispatchers: Callable[[datetime], None] | None,
        prefetch_s: float = 5.0,
    ):
        self.engine, self.wake_dispatchers, self.prefetch = (
            engine,
            wake_dispatchers,
            timedelta(seconds=prefetch_s),
        )

    def _hint(self, due: list[tuple[datetime, datetime]]) -> None:
        """Wakes the dispatchers for the earliest ``scheduled_at`` among ``(scheduled_at, now)`` pairs
        that fall inside the prefetch window."""
        soon = [at for at, now in due if at <= now + self.prefetch]
        if soon and self.wake_dispatchers is not None:
            self.wake_dispatchers(min(soon))

    async def create(self, new: NewJob, *, admit: Admit | None = None) -> tuple[Row, bool]:
        """Inserts ``new`` (idempotent per request id / idempotency key): ``(row, created)``. ``admit``
        (None: no quota) admits the one job first, before the insert and outside its transaction (the
        insert stays one statement); its :class:`QuotaExceeded` means nothing was written."""
        if admit is not None:
            await admit(None, 1)
        row, created = await run_transaction(
            self.engine,
            lambda c: jobs_store.insert_job(c, new),
            single_statement=jobs_store.inserts_in_one_statement(new),
        )
        if created:
            self._hint([(row["scheduled_at"], row["created_at"])])
        return row, created

    async def create_batch(self, batch: list[NewJob], *, admit: Admit | None = None) -> list[Row]:
        """Inserts every job of ``batch`` in one transaction (all or none); rows in request order.
        ``admit`` (None: no quota) admits all of them first, as :meth:`create` does."""
        if admit is not None:
            await admit(None, len(batch))
        rows = await run_transaction(self.engine, lambda c: jobs_store.insert_jobs(c, batch))
        self._hint([(r["scheduled_at"], r["created_at"]) for r in rows])
        return rows

    async def get(self, namespace: str, job_id: uuid.UUID) -> Row:
        """The job's row."""
        return await run_transaction(
            self.engine, lambda c: jobs_store.get_job(c, namespace, job_id), single_statement=True
        )

    async def list_jobs(
        self,
        namespace: str,
        *,
        state: str | None,
        queue: str | None,
        after: tuple[datetime, uuid.UUID] | None,
        limit: int,
        budget_bytes: int | None = None,
    ) -> tuple[list[Row], int]:
        """A page of jobs of ``namespace`` read with ``limit`` (page size + 1), newest first, after
        the keyset ``after`` (``created_at``, id), with payloads read only for the first ``k`` rows
        that fit in ``budget_bytes``: ``(rows, k)`` (:func:`gnomon.common.storage.jobs.list_jobs`)."""
        return await run_transaction(
            self.engine,
            lambda c: jobs_store.list_jobs(
                c, namespace, state=state, queue=queue, limit=limit, after=after, budget_bytes=budget_bytes
            ),
        )

    async def cancel(
        self, namespace: str, job_id: uuid.UUID, *, expected_version: int | None
    ) -> cancel_store.CancelResult:
        """Cancels the job (see :func:`gnomon.common.storage.cancel.cancel_job`): the result has the
        ``job`` row and the ``outcome`` (a :class:`~gnomon.common.domain.states.CancelOutcome`)."""
        return await run_transaction(
            self.engine,
            lambda c: cancel_store.cancel_job(c, namespace, job_id, expected_version=expected_version),
        )

    async def reschedule(self, r: Reschedule) -> Row:
        """Moves a SCHEDULED job to ``r.schedule_at`` (or now + ``r.delay``); returns its row."""
        res = await run_transaction(
            self.engine,
            lambda c: cancel_store.reschedule_job(
                c,
                r.namespace,
                r.job_id,
                schedule_at=r.schedule_at,
                delay=r.delay,
                expected_version=r.expected_version,
            ),
        )
        self._hint([(res.job["scheduled_at"], res.db_now)])
        job: Row = res.job
        return job

    async def attempts(self, namespace: str, job_id: uuid.UUID, *, after: int, limit: int) -> list[Row]:
        """At most ``limit`` attempts of the job numbered after ``after``, oldest first."""
        return await run_transaction(
            self.engine,
            lambda c: attempts_store.list_attempts(c, namespace, job_id, after=after, limit=limit),
        )
