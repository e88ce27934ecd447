"""Jobs (``gnomon.v1.JobService``): the request builders and the :class:`~gnomon.sdk.AsyncClient`
methods that create, read, list, cancel and reschedule one-time jobs and list their attempts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, cast

from gnomon._proto.gnomon.v1 import job_pb2, job_service_pb2

from . import convert
from .base import ClientBase, Payload, Span, paginate
from .models import Job, JobAttempt, RetryPolicy

__all__ = [
    "JobsClient",
    "create_job_request",
    "list_jobs_request",
    "cancel_job_request",
    "reschedule_job_request",
]


def create_job_request(
    namespace: str,
    queue: str,
    payload: Payload = b"",
    *,
    schedule_time: datetime | None = None,
    delay: Span | None = None,
    deadline: datetime | None = None,
    max_attempts: int | None = None,
    request_id: str | uuid.UUID | None = None,
    idempotency_key: str | None = None,
    lease_duration: Span | None = None,
    idempotent: bool = False,
    retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
    start_to_close: Span | None = None,
) -> job_service_pb2.CreateJobRequest:
    """Builds a ``CreateJobRequest`` (argument meanings: see :meth:`Client.create_job`).

    Raises:
        TypeError: wrong payload/time/duration type.
        ValueError: naive datetime; both ``schedule_time`` and ``delay`` given.
    """
    if schedule_time is not None and delay is not None:
        raise ValueError("pass at most one of schedule_time and delay")
    req = job_service_pb2.CreateJobRequest(
        parent=convert.namespace_parent(namespace),
        queue=queue,
        payload=convert.encode_payload(payload),
    )
    if schedule_time is not None:
        req.schedule_time.CopyFrom(convert.to_timestamp(schedule_time))
    if delay is not None:
        req.delay.CopyFrom(convert.to_duration(delay))
    if deadline is not None:
        req.deadline.CopyFrom(convert.to_timestamp(deadline))
    if max_attempts is not None:
        req.max_attempts = int(max_attempts)
    if request_id is not None:
        req.request_id = str(request_id)
    if idempotency_key is not None:
        req.idempotency_key = idempotency_key
    if lease_duration is not None:
        req.lease_duration.CopyFrom(convert.to_duration(lease_duration))
    req.idempotent = bool(idempotent)
    if retry_policy is not None:
        req.retry_policy.CopyFrom(convert.retry_policy_to_proto(retry_policy))
    if start_to_close is not None:
        req.start_to_close.CopyFrom(convert.to_duration(start_to_close))
    return req


def list_jobs_request(
    namespace: str,
    state: str | int | None = None,
    queue: str | None = None,
    page_size: int = 100,
    page_token: str = "",
) -> job_service_pb2.ListJobsRequest:
    """Builds a ``ListJobsRequest``; ``state`` as in :func:`gnomon.sdk.convert.state_value`.

    Raises:
        ValueError: unknown state.
    """
    return job_service_pb2.ListJobsRequest(
        parent=convert.namespace_parent(namespace),
        state=cast("job_pb2.JobState", convert.state_value(state)),
        queue=queue or "",
        page_size=int(page_size),
        page_token=page_token or "",
    )


def cancel_job_request(
    name: str, namespace: str, expected_version: int | None = None
) -> job_service_pb2.CancelJobRequest:
    """Builds a ``CancelJobRequest``; ``name`` is a full job name or a bare id in ``namespace``.

    Raises:
        ValueError: a malformed name.
    """
    req = job_service_pb2.CancelJobRequest(name=convert.job_name(name, namespace))
    if expected_version is not None:
        req.expected_version = int(expected_version)
    return req


def reschedule_job_request(
    name: str,
    namespace: str,
    *,
    schedule_time: datetime | None = None,
    delay: Span | None = None,
    expected_version: int | None = None,
) -> job_service_pb2.RescheduleJobRequest:
    """Builds a ``RescheduleJobRequest`` (argument meanings: see :meth:`Client.reschedule_job`).

    Raises:
        TypeError: wrong time/duration type.
        ValueError: malformed name, naive datetime, both ``schedule_time`` and ``delay`` given.
    """
    if schedule_time is not None and delay is not None:
        raise ValueError("pass at most one of schedule_time and delay")
    req = job_service_pb2.RescheduleJobRequest(name=convert.job_name(name, namespace))
    if schedule_time is not None:
        req.schedule_time.CopyFrom(convert.to_timestamp(schedule_time))
    if delay is not None:
        req.delay.CopyFrom(convert.to_duration(delay))
    if expected_version is not None:
        req.expected_version = int(expected_version)
    return req


class JobsClient(ClientBase):
    """The job methods of :class:`~gnomon.sdk.AsyncClient` (``JobService``)."""

    async def create_job(
        self,
        queue: str,
        payload: Payload = b"",
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        deadline: datetime | None = None,
        max_attempts: int | None = None,
        request_id: str | uuid.UUID | None = None,
        idempotency_key: str | None = None,
        lease_duration: Span | None = None,
        idempotent: bool = False,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        start_to_close: Span | None = None,
    ) -> Job:
        """Creates a one-time job and returns it (state ``SCHEDULED``).

        Args:
            queue: queue name (``[a-z0-9._-]``, 1-64 chars; validated by the server).
            payload: ``bytes`` (unchanged), ``str`` (UTF-8) or ``dict``/``list`` (JSON, UTF-8).
            schedule_time: aware ``datetime``: run at/after this instant. Exclusive with ``delay``.
            delay: run after this span from now (server clock): ``timedelta`` or float seconds.
            deadline: aware ``datetime``: past it an undispatched job becomes EXPIRED.
            max_attempts: 1-100 (server default 3).
            request_id: UUID making the create idempotent (a retry returns the original job).
            idempotency_key: key handed to every attempt (server default: the job id).
            lease_duration: per-attempt lease, ``timedelta`` or seconds (1 s - 1 h; default 30 s).
            idempotent: the effect is idempotent, so an attempt with an unknown outcome (lease lost
                while running) may be retried; otherwise such a job goes to the DLQ.
            start_to_close: the longest one attempt may run once started (``timedelta`` or
                seconds, 1 s - 7 days); past it the handler is cancelled and the attempt timed out.
            retry_policy: a :class:`~gnomon.sdk.RetryPolicy` or a dict with its keys (backoff,
                multiplier, jitter, max_age, non_retryable_errors); unset fields take the server's
                defaults (1 s initial, 300 s cap, x2, full jitter, no max age).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (see ``field_violations``), ``ALREADY_EXISTS``
                (``request_id`` reused for a different request), ``UNAVAILABLE``, ...
            TypeError, ValueError: arguments that cannot be encoded (naive datetime, both
                ``schedule_time`` and ``delay``, an unsupported payload type).
        """
        req = create_job_request(
            self.namespace,
            queue,
            payload,
            schedule_time=schedule_time,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            request_id=request_id,
            idempotency_key=idempotency_key,
            lease_duration=lease_duration,
            idempotent=idempotent,
            retry_policy=retry_policy,
            start_to_close=start_to_close,
        )
        return convert.job_from_proto((await self._call(self._jobs.CreateJob, req)).job)

    async def get_job(self, name: str) -> Job:
        """Reads one job by full name (``namespaces/x/jobs/<id>``) or bare id (this client's
        namespace).

        Raises:
            GnomonError: ``NOT_FOUND`` if the job does not exist in that namespace.
            ValueError: a malformed name.
        """
        req = job_service_pb2.GetJobRequest(name=convert.job_name(name, self.namespace))
        return convert.job_from_proto((await self._call(self._jobs.GetJob, req)).job)

    async def list_jobs_page(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[Job], str]:
        """Lists one page of jobs (newest first): ``(jobs, next_page_token)``; the token is ""
        on the last page.

        Args:
            state: ``"SCHEDULED"``/``"JOB_STATE_SCHEDULED"``/enum number, or ``None`` for any.
            queue: only this queue, or ``None`` for any.
            page_size: 1-1000.
            page_token: from the previous page (other arguments unchanged).

        Raises:
            GnomonError: e.g. ``INVALID_ARGUMENT`` for a bad page token.
            ValueError: unknown state name.
        """
        req = list_jobs_request(self.namespace, state, queue, page_size, page_token)
        resp = await self._call(self._jobs.ListJobs, req)
        return [convert.job_from_proto(j) for j in resp.jobs], resp.next_page_token

    def list_jobs(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """Iterates over all matching jobs (newest first), fetching pages lazily
        (``async for job in c.list_jobs(...)``; the sync client's is a plain iterator).

        Raises (while iterating): :class:`GnomonError`, ``ValueError`` as :meth:`list_jobs_page`.
        """
        return paginate(lambda token: self.list_jobs_page(state, queue, page_size, token))

    async def cancel_job(self, name: str, expected_version: int | None = None) -> tuple[str, Job]:
        """Cancels a job; returns ``(outcome, job)``, ``outcome`` one of :data:`~gnomon.sdk.models.CANCEL_OUTCOMES`.

        A SCHEDULED or QUEUED job is ``CANCELLED`` at once (it will not run). A RUNNING job gets
        ``CANCEL_REQUESTED``: its handler sees ``ctx.cancelled`` and the job ends CANCELLED when
        the handler fails or raises :class:`~gnomon.sdk.Cancelled`, SUCCEEDED if it succeeds
        anyway; it is never retried. A finished job gives ``ALREADY_FINISHED`` and is unchanged.

        Args:
            name: full job name or bare id (this client's namespace).
            expected_version: cancel only if the job is at this version.

        Raises:
            GnomonError: ``NOT_FOUND``; ``FAILED_PRECONDITION`` (reason ``STALE_VERSION``) when
                ``expected_version`` differs; ``ABORTED`` (``CONCURRENT_MODIFICATION``), retry.
            ValueError: a malformed name.
        """
        resp = await self._call(
            self._jobs.CancelJob, cancel_job_request(name, self.namespace, expected_version)
        )
        return convert.cancel_outcome(resp.outcome), convert.job_from_proto(resp.job)

    async def reschedule_job(
        self,
        name: str,
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        expected_version: int | None = None,
    ) -> Job:
        """Moves the schedule time of a job not yet dispatched (SCHEDULED); returns the job.

        Args:
            name: full job name or bare id (this client's namespace).
            schedule_time: aware ``datetime``: the new instant. Exclusive with ``delay``.
            delay: new time = now (server clock) + this span (``timedelta`` or seconds).
                Neither argument: now.
            expected_version: reschedule only if the job is at this version.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (``schedule_time``/``delay`` out of range, or not
                before the job's deadline); ``NOT_FOUND``; ``FAILED_PRECONDITION`` with reason
                ``JOB_NOT_RESCHEDULABLE`` (dispatched, running or finished) or ``STALE_VERSION``.
            TypeError, ValueError: arguments that cannot be encoded.
        """
        req = reschedule_job_request(
            name, self.namespace, schedule_time=schedule_time, delay=delay, expected_version=expected_version
        )
        return convert.job_from_proto((await self._call(self._jobs.RescheduleJob, req)).job)

    async def list_job_attempts(self, name: str, page_size: int = 100) -> list[JobAttempt]:
        """The attempt history of a job, oldest first: who ran each attempt (worker, dispatcher,
        fencing token), how it ended (state, failure class, error) and when. Follows page tokens
        (a job has at most 100 attempts, so it is usually one call).

        Args:
            name: full job name (``namespaces/x/jobs/<id>``) or bare id (this client's namespace).
            page_size: attempts per call, 1-100.

        Raises:
            GnomonError: ``NOT_FOUND`` if the job does not exist in that namespace.
            ValueError: a malformed name.
        """
        parent = convert.job_name(name, self.namespace)

        async def page(token: str) -> tuple[list[JobAttempt], str]:
            req = job_service_pb2.ListJobAttemptsRequest(
                parent=parent, page_size=int(page_size), page_token=token
            )
            resp = await self._call(self._jobs.ListJobAttempts, req)
            return [convert.job_attempt_from_proto(a) for a in resp.attempts], resp.next_page_token

        return [a async for a in paginate(page)]
