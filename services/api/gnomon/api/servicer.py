"""Thin gRPC adapters of the API's JobService and ClusterService: validate, convert, call the engine
(:mod:`gnomon.api.jobs`, :mod:`gnomon.api.cluster`). No business rules here."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
)
from gnomon.api.cluster import ClusterEngine
from gnomon.api.convert import attempt_to_proto, job_to_proto
from gnomon.api.jobs import JobEngine
from gnomon.api.list_gate import ListGate
from gnomon.api.validation import validate_batch, validate_create, validate_reschedule
from gnomon.common import pagination, tracing
from gnomon.common.config import REPLY_BUDGET_BYTES
from gnomon.common.coordination.hints import DispatcherHints
from gnomon.common.errors import FieldViolation, InvalidArgument
from gnomon.common.names import parse_job_name, parse_parent
from gnomon.common.rpc.admission import current_admit
from gnomon.common.rpc.auth import current_caller
from gnomon.common.timeconv import to_timestamp


def _metadata(context) -> Any:
    """The call's metadata when tracing is on (read for its ``traceparent``), else None (not read)."""
    return context.invocation_metadata() if tracing.ENABLED else None


class JobServicer(job_service_pb2_grpc.JobServiceServicer):
    """``gnomon.v1.JobService``: validates and converts, then calls the job engine
    (:class:`gnomon.api.jobs.JobEngine`). ``shards``: the region's shard count (a new job's shard is
    a hash of its id). ``jobs``: the engine every handler calls (built by
    :func:`gnomon.api.service.build`, or by :meth:`on`). Creates are admitted against the
    namespace's ``max_pending_jobs`` and ``max_create_rate`` through the admission the interceptor
    binds to the call (:func:`gnomon.common.rpc.admission.current_admit`; the engine calls it)."""

    def __init__(
        self,
        jobs: JobEngine,
        *,
        region: str,
        shards: int,
        reply_budget_bytes: int = REPLY_BUDGET_BYTES,
        list_gate: ListGate | None = None,
    ):
        self.region, self.shards, self.jobs = region, shards, jobs
        #: most serialized bytes of a List reply's items (``GNOMON_REPLY_BUDGET_BYTES``)
        self.reply_budget_bytes = reply_budget_bytes
        #: per-principal turns of ListJobs (GNOMON_LIST_CONCURRENCY_PER_PRINCIPAL)
        self.list_gate = list_gate or ListGate()

    @classmethod
    def on(
        cls,
        engine: AsyncEngine,
        *,
        region: str,
        shards: int,
        hints: DispatcherHints | None = None,
        prefetch_s: float = 5.0,
    ) -> JobServicer:
        """A servicer over a new :class:`JobEngine` on ``engine``; ``hints`` (None: none) wakes
        dispatchers for jobs due within ``prefetch_s`` seconds."""
        wake = hints.wake if hints is not None else None
        return cls(
            JobEngine(engine, wake_dispatchers=wake, prefetch_s=prefetch_s), region=region, shards=shards
        )

    async def CreateJob(self, request, context):
        """Creates one job (idempotent per ``request_id`` and per ``idempotency_key``) and returns it.
        INVALID_ARGUMENT lists every bad field; ALREADY_EXISTS for a key reused with another request;
        RESOURCE_EXHAUSTED (QUOTA_EXCEEDED, with RetryInfo) over a namespace quota, nothing written."""
        new = validate_create(request, region=self.region, shards=self.shards)
        with tracing.creating(_metadata(context), [new]) as (traced,):
            row, _ = await self.jobs.create(traced, admit=current_admit())
        return job_service_pb2.CreateJobResponse(job=job_to_proto(row))

    async def BatchCreateJobs(self, request, context):
        """Creates 1-1000 jobs of one ``parent`` in one transaction (all or none), in request order.
        INVALID_ARGUMENT names ``requests[i].field`` for every bad field; RESOURCE_EXHAUSTED
        (QUOTA_EXCEEDED) when the batch's jobs exceed a namespace quota (each job counts)."""
        batch = validate_batch(request.parent, request.requests, region=self.region, shards=self.shards)
        with tracing.creating(_metadata(context), batch) as traced:
            rows = await self.jobs.create_batch(traced, admit=current_admit())
        return job_service_pb2.BatchCreateJobsResponse(jobs=[job_to_proto(r) for r in rows])

    async def GetJob(self, request, context):
        """The job ``name``. INVALID_ARGUMENT for a bad name, NOT_FOUND for an unknown job."""
        ns, job_id = parse_job_name(request.name)
        return job_service_pb2.GetJobResponse(job=job_to_proto(await self.jobs.get(ns, job_id)))

    async def ListJobs(self, request, context):
        """Jobs of ``parent``, newest first, optionally one ``state`` and ``queue``; ``page_size``
        0-1000 (0 = 100). INVALID_ARGUMENT for a bad parent, page size, state or page token (a token
        of another request's filters included). Payloads are read only for the jobs that fit in the
        reply's byte budget (``GNOMON_REPLY_BUDGET_BYTES``), so a call holds at most about that many
        payload bytes whatever its page size; the page then ends early with a next_page_token. At
        most ``list_gate.per_principal`` ListJobs/ListDeadLetters of one principal run at once here;
        more wait, then UNAVAILABLE (LISTINGS_BUSY)."""
        ns = parse_parent(request.parent)
        size = pagination.checked_page_size(request.page_size)
        state = None
        if request.state != job_pb2.JOB_STATE_UNSPECIFIED:
            name = (
                job_pb2.JobState.Name(request.state) if request.state in job_pb2.JobState.values() else None
            )
            if name is None:
                raise InvalidArgument([FieldViolation("state", "unknown state")])
            state = name.removeprefix("JOB_STATE_")
        filt = pagination.fingerprint(ns, state, request.queue)
        after = pagination.decode_keyset(request.page_token, "ListJobs", filt) if request.page_token else None
        async with self.list_gate.turn(current_caller().principal.name):
            rows, fits = await self.jobs.list_jobs(
                ns,
                state=state,
                queue=request.queue or None,
                after=after,
                limit=size + 1,
                budget_bytes=self.reply_budget_bytes,
            )
            items, token = pagination.budgeted_page(
                rows,
                fits,
                "ListJobs",
                filt,
                lambda r: pagination.keyset(r["created_at"], r["id"]),
                job_to_proto,
                budget_bytes=self.reply_budget_bytes,
            )
        return job_service_pb2.ListJobsResponse(jobs=items, next_page_token=token)

    async def CancelJob(self, request, context):
        """Cancels the job ``name`` (``expected_version`` checked when set): a SCHEDULED job is
        CANCELLED at once, a running one gets a cancel request. Returns the job and the outcome.
        INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION (stale version)."""
        ns, job_id = parse_job_name(request.name)
        expected = request.expected_version if request.HasField("expected_version") else None
        res = await self.jobs.cancel(ns, job_id, expected_version=expected)
        return job_service_pb2.CancelJobResponse(
            job=job_to_proto(res.job), outcome="CANCEL_OUTCOME_" + res.outcome
        )

    async def RescheduleJob(self, request, context):
        """Moves a SCHEDULED job to ``schedule_time`` (or now + ``delay``) and returns it.
        INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION (not SCHEDULED, or a stale version)."""
        row = await self.jobs.reschedule(validate_reschedule(request))
        return job_service_pb2.RescheduleJobResponse(job=job_to_proto(row))

    async def ListJobAttempts(self, request, context):
        """The attempts of job ``parent``, oldest first; ``page_size`` up to 100 (0 or more = 100).
        INVALID_ARGUMENT for a bad name, a negative page size or a token of another job; NOT_FOUND for
        an unknown job."""
        ns, job_id = parse_job_name(request.parent, field="parent")
        size = pagination.clamped_page_size(request.page_size, maximum=pagination.ATTEMPTS_PAGE_SIZE)
        filt = pagination.fingerprint(ns, job_id)
        after = (
            pagination.int_of(
                pagination.decode(request.page_token, "ListJobAttempts", filt), "a", "ListJobAttempts"
            )
            if request.page_token
            else 0
        )
        rows = await self.jobs.attempts(ns, job_id, after=after, limit=size + 1)
        items, token = pagination.budgeted_page(
            rows,
            size,
            "ListJobAttempts",
            filt,
            lambda r: {"a": r["attempt"]},
            attempt_to_proto,
            budget_bytes=self.reply_budget_bytes,
        )
        return job_service_pb2.ListJobAttemptsResponse(attempts=items, next_page_token=token)


class ClusterServicer(cluster_service_pb2_grpc.ClusterServiceServicer):
    """``gnomon.v1.ClusterService``: validates the region, calls the cluster engine
    (:class:`gnomon.api.cluster.ClusterEngine`: the etcd registry joined with the fencing tokens
    recorded in the database) and converts. ``region`` is the default region of the requests."""

    def __init__(self, cluster: ClusterEngine, *, region: str):
        self.cluster, self.region = cluster, region

    async def ListDispatchers(self, request, context):
        """The dispatchers registered in ``region`` (default: this API's), with their addresses.
        UNAVAILABLE (COORDINATION_UNAVAILABLE) when etcd cannot be read."""
        ds = await self.cluster.dispatchers(request.region or self.region)
        return cluster_service_pb2.ListDispatchersResponse(
            dispatchers=[
                cluster_service_pb2.Dispatcher(
                    dispatcher_id=d.dispatcher_id, region=d.region, address=d.address
                )
                for d in ds
            ]
        )

    async def ListShards(self, request, context):
        """Every shard of ``region`` (default: this API's): its etcd owner and fencing token, the
        token recorded in the database and when it was acquired. INVALID_ARGUMENT for a bad region,
        UNAVAILABLE when etcd cannot be read."""
        region = request.region or self.region
        if not _REGION.fullmatch(region):
            raise InvalidArgument([FieldViolation("region", "must match [a-z][a-z0-9-]{0,31}")])
        out = []
        for view in await self.cluster.shard_views(region):
            shard = cluster_service_pb2.Shard(
                region=view.region,
                shard=view.shard,
                owner=view.owner,
                fencing_token=view.fencing_token,
                recorded_token=view.recorded_token,
                owned=view.owned,
            )
            if view.acquired_at is not None:
                shard.acquire_time.CopyFrom(to_timestamp(view.acquired_at))
            out.append(shard)
        return cluster_service_pb2.ListShardsResponse(shards=out)


_REGION = re.compile(r"[a-z][a-z0-9-]{0,31}")
