"""The job client: create, read, list, cancel and reschedule jobs, list dispatchers (sync
:class:`Client` and :class:`AsyncClient` on ``grpc.aio``).

Both clients build the same requests (see :func:`create_job_request`, :func:`list_jobs_request`,
:func:`cancel_job_request`, :func:`reschedule_job_request`) and raise :class:`~gnomon.sdk.errors.GnomonError` for every failed RPC.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, AsyncIterator, Iterator, Mapping

import grpc

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    queue_service_pb2,
    queue_service_pb2_grpc,
)

from . import convert
from . import dead_letters as _dlq
from .dead_letters import AuditEntry, DeadLetter, ReplayResult
from .errors import GnomonError
from .queues import Queue, queue_name
from .retry import RetryPolicy, retry_policy_to_proto
from .models import DispatcherInfo, Job, JobAttempt

__all__ = ["Client", "AsyncClient", "create_job_request", "list_jobs_request", "cancel_job_request",
           "reschedule_job_request", "CANCEL_OUTCOMES"]

DEFAULT_API = "127.0.0.1:7070"

Payload = bytes | bytearray | str | dict | list | None
Span = timedelta | float | int


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
        req.retry_policy.CopyFrom(retry_policy_to_proto(retry_policy))
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
        state=convert.state_value(state),
        queue=queue or "",
        page_size=int(page_size),
        page_token=page_token or "",
    )


#: What :meth:`Client.cancel_job` reports: the job was cancelled (it was SCHEDULED or QUEUED), its
#: cancellation was requested (RUNNING: the worker is told; the job ends SUCCEEDED if the handler
#: still succeeds, else CANCELLED), or it had finished already (nothing changed).
CANCEL_OUTCOMES = ("CANCELLED", "CANCEL_REQUESTED", "ALREADY_FINISHED")


def cancel_job_request(name: str, namespace: str, expected_version: int | None = None
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


def _outcome(value: int) -> str:
    """``CANCEL_OUTCOME_CANCELLED`` (enum number) -> ``"CANCELLED"``; unknown -> ``"UNKNOWN_<n>"``."""
    try:
        return job_service_pb2.CancelOutcome.Name(value).removeprefix("CANCEL_OUTCOME_")
    except ValueError:
        return f"UNKNOWN_{value}"


class Client:
    """Synchronous client of the Gnomon API (``JobService`` + ``ClusterService``).

    Args:
        api: ``host:port`` of the API server.
        namespace: tenant namespace id (``"default"``) or ``"namespaces/<id>"``.
        timeout: per-call deadline in seconds (``None``: no deadline).
        credentials: ``grpc.ChannelCredentials`` for TLS; ``None`` -> plaintext.
        metadata: extra call metadata (e.g. auth headers) sent with every RPC.
        channel_options: extra ``grpc`` channel options.

    Every method raises :class:`GnomonError` when the RPC fails. Usable as a context manager
    (closes the channel on exit).
    """

    def __init__(
        self,
        api: str = DEFAULT_API,
        namespace: str = "default",
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace.removeprefix("namespaces/")
        self.timeout = timeout
        self._metadata = tuple(metadata or ())
        opts = list(channel_options or ())
        if credentials is None:
            self._channel = grpc.insecure_channel(api, options=opts)
        else:
            self._channel = grpc.secure_channel(api, credentials, options=opts)
        self._jobs = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_service_pb2_grpc.ClusterServiceStub(self._channel)
        self._queues = queue_service_pb2_grpc.QueueServiceStub(self._channel)

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata or None)
        except grpc.RpcError as err:
            raise GnomonError.from_rpc_error(err) from None

    def create_job(
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
            self.namespace, queue, payload, schedule_time=schedule_time, delay=delay,
            deadline=deadline, max_attempts=max_attempts, request_id=request_id,
            idempotency_key=idempotency_key, lease_duration=lease_duration, idempotent=idempotent,
            retry_policy=retry_policy, start_to_close=start_to_close,
        )
        return Job.from_proto(self._call(self._jobs.CreateJob, req).job)

    def get_job(self, name: str) -> Job:
        """Reads one job by full name (``namespaces/x/jobs/<id>``) or bare id (this client's
        namespace).

        Raises:
            GnomonError: ``NOT_FOUND`` if the job does not exist in that namespace.
            ValueError: a malformed name.
        """
        req = job_service_pb2.GetJobRequest(name=convert.job_name(name, self.namespace))
        return Job.from_proto(self._call(self._jobs.GetJob, req).job)

    def list_jobs_page(
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
        resp = self._call(self._jobs.ListJobs, req)
        return [Job.from_proto(j) for j in resp.jobs], resp.next_page_token

    def list_jobs(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Iterates over all matching jobs (newest first), fetching pages lazily.

        Raises (while iterating): :class:`GnomonError`, ``ValueError`` as :meth:`list_jobs_page`.
        """
        token = ""
        while True:
            jobs, token = self.list_jobs_page(state, queue, page_size, token)
            yield from jobs
            if not token:
                return

    def cancel_job(self, name: str, expected_version: int | None = None) -> tuple[str, Job]:
        """Cancels a job; returns ``(outcome, job)``, ``outcome`` one of :data:`CANCEL_OUTCOMES`.

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
        resp = self._call(self._jobs.CancelJob, cancel_job_request(name, self.namespace, expected_version))
        return _outcome(resp.outcome), Job.from_proto(resp.job)

    def reschedule_job(
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
        req = reschedule_job_request(name, self.namespace, schedule_time=schedule_time, delay=delay,
                                     expected_version=expected_version)
        return Job.from_proto(self._call(self._jobs.RescheduleJob, req).job)

    def list_job_attempts(self, name: str, page_size: int = 100) -> list[JobAttempt]:
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
        parent, token, out = convert.job_name(name, self.namespace), "", []
        while True:
            req = job_service_pb2.ListJobAttemptsRequest(parent=parent, page_size=int(page_size), page_token=token)
            resp = self._call(self._jobs.ListJobAttempts, req)
            out.extend(JobAttempt.from_proto(a) for a in resp.attempts)
            token = resp.next_page_token
            if not token:
                return out

    def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Lists live dispatchers of ``region`` ("" = the API's own region).

        Raises:
            GnomonError: when the RPC fails.
        """
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

    def get_queue(self, queue: str) -> Queue:
        """Reads a queue's health: circuit breaker state, retry budget, due backlog. ``queue`` is a
        queue id of this client's namespace or ``namespaces/{ns}/queues/{queue}``.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` for a malformed name, ``UNAVAILABLE``, ...
            ValueError: an empty or malformed name.
        """
        req = queue_service_pb2.GetQueueRequest(name=queue_name(queue, self.namespace))
        return Queue.from_proto(self._call(self._queues.GetQueue, req).queue)

    # -- dead-letter queue (gnomon.v1.DeadLetterService; models in gnomon.sdk.dead_letters) --

    def list_dead_letters_page(
        self,
        *,
        queue: str | None = None,
        failure_class: str | None = None,
        error_contains: str | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        include_replayed: bool = False,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[DeadLetter], str]:
        """One page of dead letters (jobs in state DEAD), most recently finished first:
        ``(dead_letters, next_page_token)``, the token "" on the last page.

        Args:
            queue: only this queue. failure_class: only this class of last failure (e.g.
                ``"PERMANENT"``). error_contains: only those whose last error contains this text
                (case-insensitive). start_time / end_time: aware datetimes, finish time in
                ``[start_time, end_time)``. include_replayed: also those replayed already.
            page_size: 1-1000. page_token: from the previous page (other arguments unchanged).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (field violations), ``PERMISSION_DENIED``, ...
        """
        req = _dlq.list_dead_letters_request(
            self.namespace, queue=queue, failure_class=failure_class, error_contains=error_contains,
            start_time=start_time, end_time=end_time, include_replayed=include_replayed,
            page_size=page_size, page_token=page_token)
        resp = _dlq.call(self, "ListDeadLetters", req)
        return [DeadLetter.from_proto(d) for d in resp.dead_letters], resp.next_page_token

    def list_dead_letters(self, *, page_size: int = 100, **filters) -> Iterator[DeadLetter]:
        """Iterates over all matching dead letters (filters as :meth:`list_dead_letters_page`),
        fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_dead_letters_page(page_size=page_size, page_token=token, **filters)
            yield from items
            if not token:
                return

    def replay_dead_letters(
        self,
        *,
        max_rate: float,
        max_jobs: int,
        reason: str,
        queue: str | None = None,
        failure_class: str | None = None,
        error_contains: str | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        dry_run: bool = False,
        request_id: str | uuid.UUID | None = None,
        timeout: float | None = None,
    ) -> ReplayResult:
        """Replays matching dead letters (filters as :meth:`list_dead_letters_page`, only those not
        replayed yet) as new jobs released at most ``max_rate`` per second (their schedule times
        are spaced ``1/max_rate`` s apart), oldest first, at most ``max_jobs``. The dead jobs stay
        DEAD and point at their replays (``replayed_by``). Audited (``reason``, this client's
        ``x-gnomon-actor`` metadata and address).

        Args:
            max_rate: jobs per second, 0 < max_rate <= 1000.
            max_jobs: 1-100000.
            reason: why (audit log), 1-1000 characters.
            dry_run: only count (and audit); nothing is replayed.
            request_id: UUID making the call idempotent; default a fresh one (see
                :attr:`ReplayResult.request_id`). Repeating it returns the same result, and finishes
                a replay that was interrupted.
            timeout: seconds for this call (default: the client's); a replay of many thousand jobs
                takes a while (500 per transaction).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (field violations: ``max_rate``, ``max_jobs``,
                ``reason``, ...), ``ALREADY_EXISTS`` (``request_id`` used with another filter or
                rate), ``PERMISSION_DENIED`` (``NAMESPACE_NOT_ALLOWED``), ``UNAVAILABLE``, ...
        """
        req = _dlq.replay_dead_letters_request(
            self.namespace, max_rate=max_rate, max_jobs=max_jobs, reason=reason, queue=queue,
            failure_class=failure_class, error_contains=error_contains, start_time=start_time,
            end_time=end_time, dry_run=dry_run, request_id=request_id)
        return _dlq.replay_result(_dlq.call(self, "ReplayDeadLetters", req, timeout), req.request_id)

    def list_audit_entries_page(self, page_size: int = 100, page_token: str = "") -> tuple[list[AuditEntry], str]:
        """One page of this namespace's audit log (DLQ replays and dry runs), newest first:
        ``(entries, next_page_token)``.

        Raises:
            GnomonError: when the RPC fails.
        """
        req = _dlq.list_audit_entries_request(self.namespace, page_size, page_token)
        resp = _dlq.call(self, "ListAuditEntries", req)
        return [AuditEntry.from_proto(e) for e in resp.audit_entries], resp.next_page_token

    def list_audit_entries(self, page_size: int = 100) -> Iterator[AuditEntry]:
        """Iterates over the whole audit log of this namespace, newest first, fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_audit_entries_page(page_size, token)
            yield from items
            if not token:
                return

    def close(self) -> None:
        """Closes the channel. Idempotent."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient:
    """Asynchronous (``grpc.aio``) twin of :class:`Client`: same arguments, same methods, but
    every method is a coroutine, :meth:`list_jobs` is an async iterator, and :meth:`close` must be
    awaited. Use ``async with AsyncClient(...) as c:``. Create it inside a running event loop.
    """

    def __init__(
        self,
        api: str = DEFAULT_API,
        namespace: str = "default",
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace.removeprefix("namespaces/")
        self.timeout = timeout
        self._metadata = tuple(metadata or ())
        opts = list(channel_options or ())
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(api, options=opts)
        else:
            self._channel = grpc.aio.secure_channel(api, credentials, options=opts)
        self._jobs = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_service_pb2_grpc.ClusterServiceStub(self._channel)
        self._queues = queue_service_pb2_grpc.QueueServiceStub(self._channel)

    async def _call(self, method, request):
        try:
            return await method(request, timeout=self.timeout, metadata=self._metadata or None)
        except grpc.RpcError as err:
            raise GnomonError.from_rpc_error(err) from None

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
        """Async :meth:`Client.create_job`."""
        req = create_job_request(
            self.namespace, queue, payload, schedule_time=schedule_time, delay=delay,
            deadline=deadline, max_attempts=max_attempts, request_id=request_id,
            idempotency_key=idempotency_key, lease_duration=lease_duration, idempotent=idempotent,
            retry_policy=retry_policy, start_to_close=start_to_close,
        )
        return Job.from_proto((await self._call(self._jobs.CreateJob, req)).job)

    async def get_job(self, name: str) -> Job:
        """Async :meth:`Client.get_job`."""
        req = job_service_pb2.GetJobRequest(name=convert.job_name(name, self.namespace))
        return Job.from_proto((await self._call(self._jobs.GetJob, req)).job)

    async def list_jobs_page(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[Job], str]:
        """Async :meth:`Client.list_jobs_page`."""
        req = list_jobs_request(self.namespace, state, queue, page_size, page_token)
        resp = await self._call(self._jobs.ListJobs, req)
        return [Job.from_proto(j) for j in resp.jobs], resp.next_page_token

    async def list_jobs(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """Async iterator over all matching jobs (``async for job in c.list_jobs(...)``)."""
        token = ""
        while True:
            jobs, token = await self.list_jobs_page(state, queue, page_size, token)
            for job in jobs:
                yield job
            if not token:
                return

    async def cancel_job(self, name: str, expected_version: int | None = None) -> tuple[str, Job]:
        """Async :meth:`Client.cancel_job`."""
        req = cancel_job_request(name, self.namespace, expected_version)
        resp = await self._call(self._jobs.CancelJob, req)
        return _outcome(resp.outcome), Job.from_proto(resp.job)

    async def reschedule_job(
        self,
        name: str,
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        expected_version: int | None = None,
    ) -> Job:
        """Async :meth:`Client.reschedule_job`."""
        req = reschedule_job_request(name, self.namespace, schedule_time=schedule_time, delay=delay,
                                     expected_version=expected_version)
        return Job.from_proto((await self._call(self._jobs.RescheduleJob, req)).job)

    async def list_job_attempts(self, name: str, page_size: int = 100) -> list[JobAttempt]:
        """Async :meth:`Client.list_job_attempts`."""
        parent, token, out = convert.job_name(name, self.namespace), "", []
        while True:
            req = job_service_pb2.ListJobAttemptsRequest(parent=parent, page_size=int(page_size), page_token=token)
            resp = await self._call(self._jobs.ListJobAttempts, req)
            out.extend(JobAttempt.from_proto(a) for a in resp.attempts)
            token = resp.next_page_token
            if not token:
                return out

    async def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Async :meth:`Client.list_dispatchers`."""
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = await self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

    async def get_queue(self, queue: str) -> Queue:
        """Async :meth:`Client.get_queue`."""
        req = queue_service_pb2.GetQueueRequest(name=queue_name(queue, self.namespace))
        return Queue.from_proto((await self._call(self._queues.GetQueue, req)).queue)

    # -- dead-letter queue (see Client) --

    async def list_dead_letters_page(self, *, page_size: int = 100, page_token: str = "",
                                     **filters) -> tuple[list[DeadLetter], str]:
        """Async :meth:`Client.list_dead_letters_page`."""
        req = _dlq.list_dead_letters_request(self.namespace, page_size=page_size, page_token=page_token, **filters)
        resp = await _dlq.acall(self, "ListDeadLetters", req)
        return [DeadLetter.from_proto(d) for d in resp.dead_letters], resp.next_page_token

    async def list_dead_letters(self, *, page_size: int = 100, **filters) -> AsyncIterator[DeadLetter]:
        """Async iterator over all matching dead letters."""
        token = ""
        while True:
            items, token = await self.list_dead_letters_page(page_size=page_size, page_token=token, **filters)
            for item in items:
                yield item
            if not token:
                return

    async def replay_dead_letters(self, *, max_rate: float, max_jobs: int, reason: str,
                                  timeout: float | None = None, **kwargs) -> ReplayResult:
        """Async :meth:`Client.replay_dead_letters`."""
        req = _dlq.replay_dead_letters_request(self.namespace, max_rate=max_rate, max_jobs=max_jobs, reason=reason,
                                               **kwargs)
        return _dlq.replay_result(await _dlq.acall(self, "ReplayDeadLetters", req, timeout), req.request_id)

    async def list_audit_entries_page(self, page_size: int = 100,
                                      page_token: str = "") -> tuple[list[AuditEntry], str]:
        """Async :meth:`Client.list_audit_entries_page`."""
        req = _dlq.list_audit_entries_request(self.namespace, page_size, page_token)
        resp = await _dlq.acall(self, "ListAuditEntries", req)
        return [AuditEntry.from_proto(e) for e in resp.audit_entries], resp.next_page_token

    async def close(self) -> None:
        """Closes the channel. Idempotent."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
