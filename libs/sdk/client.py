"""The job client: create, read and list jobs, list dispatchers (sync :class:`Client` and
:class:`AsyncClient` on ``grpc.aio``).

Both clients build the same requests (see :func:`create_job_request`, :func:`list_jobs_request`)
and raise :class:`~gnomon.sdk.errors.GnomonError` for every failed RPC.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import AsyncIterator, Iterator

import grpc

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
)

from . import convert
from .errors import GnomonError
from .models import DispatcherInfo, Job

__all__ = ["Client", "AsyncClient", "create_job_request", "list_jobs_request"]

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

    def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Lists live dispatchers of ``region`` ("" = the API's own region).

        Raises:
            GnomonError: when the RPC fails.
        """
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

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
    ) -> Job:
        """Async :meth:`Client.create_job`."""
        req = create_job_request(
            self.namespace, queue, payload, schedule_time=schedule_time, delay=delay,
            deadline=deadline, max_attempts=max_attempts, request_id=request_id,
            idempotency_key=idempotency_key, lease_duration=lease_duration, idempotent=idempotent,
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

    async def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Async :meth:`Client.list_dispatchers`."""
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = await self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

    async def close(self) -> None:
        """Closes the channel. Idempotent."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
