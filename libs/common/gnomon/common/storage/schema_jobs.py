"""The ``jobs`` and ``attempts`` tables: the per-job path (re-exported by
:mod:`gnomon.common.storage.schema`).

Index policy (migration 0020, docs/architecture.md "Indexes and the write set"): an update that changes
no indexed column (index keys and partial-index predicates) can be HOT and writes no index entry; any
other update adds an entry to every index whose predicate the new row meets. So every index on a
column the per-job path changes is partial to the states that read it, and every reader names the
index's predicate (states inline, :mod:`gnomon.common.storage.predicates`) so generic plans reach it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    Uuid,
    false,
    func,
    text,
)

from gnomon.common.domain.states import ACTIVE, JobState
from gnomon.common.storage.schema_base import TS, metadata, with_fillfactor

#: Job states read through ``ix_jobs_pending_dead``: pending (namespace quotas) and DEAD (the DLQ).
PENDING_DEAD: tuple[JobState, ...] = (JobState.SCHEDULED, JobState.QUEUED, JobState.DEAD)
PENDING_DEAD_SQL = "(" + ", ".join(f"'{s}'" for s in PENDING_DEAD) + ")"
ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in ACTIVE) + ")"
#: Heap fill of ``attempts`` (percent). A batched accept rewrites every attempt of a page in one
#: statement, so a page needs room for a new version of each of its rows to keep them HOT (80 % left
#: room for about one in five); the heap is about twice the live rows in exchange.
ATTEMPTS_FILLFACTOR = 50


#: One row per job (a one-time job or, later, one occurrence of a schedule).
jobs = Table(
    "jobs",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("namespace", String(63), nullable=False),
    Column("region", String(32), nullable=False),
    Column("shard", Integer, nullable=False, comment="job hash mod S: the due-index slice"),
    Column("queue", String(64), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("state", String(16), nullable=False),
    Column("version", BigInteger, nullable=False, comment="bumped by every transition"),
    Column("scheduled_at", TS, nullable=False, comment="eligible from this instant (UTC)"),
    Column("deadline", TS, nullable=True),
    Column("max_attempts", Integer, nullable=False),
    Column(
        "attempt", Integer, nullable=False, comment="current/last attempt number, 0 before the first claim"
    ),
    Column("idempotency_key", String(255), nullable=False),
    Column("lease_ms", Integer, nullable=False, comment="lease duration per attempt, ms"),
    Column("request_id", Uuid, nullable=True),
    Column(
        "request_hash",
        String(64),
        nullable=True,
        comment="sha256 of the create request, for request_id reuse",
    ),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column("dispatched_at", TS, nullable=True),
    Column("started_at", TS, nullable=True),
    Column("finished_at", TS, nullable=True),
    Column("last_error", Text, nullable=True),
    Column(
        "idempotent",
        Boolean,
        nullable=False,
        server_default=false(),
        comment="an attempt whose outcome is unknown (lease lost while running) may be retried",
    ),
    Column("failure_class", String(16), nullable=True, comment="class of the last failure"),
    Column("cancel_requested_at", TS, nullable=True, comment="cancellation asked while RUNNING"),
    Column("replay_of", Uuid, nullable=True, comment="DLQ provenance: the dead job this job replays"),
    Column("replayed_by", Uuid, nullable=True, comment="DLQ provenance: the job replaying this dead job"),
    Column(
        "start_to_close_ms",
        BigInteger,
        nullable=True,
        comment="bound on one attempt's run time once accepted, ms; NULL = none",
    ),
    Column(
        "checkpoint",
        LargeBinary,
        nullable=True,
        comment="latest progress checkpoint saved by a running attempt (<= 64 KiB); handed to the next attempt",
    ),
    CheckConstraint(
        "checkpoint IS NULL OR octet_length(checkpoint) <= 65536", name="ck_jobs_checkpoint_size"
    ),
    # The retry policy (migration 0005; gnomon.common.retry.RetryPolicy, defaults as in the API).
    Column(
        "retry_initial_ms",
        BigInteger,
        nullable=False,
        server_default=text("1000"),
        comment="backoff before the first retry, ms",
    ),
    Column(
        "retry_max_ms", BigInteger, nullable=False, server_default=text("300000"), comment="backoff cap, ms"
    ),
    Column(
        "retry_multiplier",
        Double,
        nullable=False,
        server_default=text("2.0"),
        comment="backoff growth per retry",
    ),
    Column(
        "retry_jitter",
        Double,
        nullable=False,
        server_default=text("1.0"),
        comment="randomized fraction of each delay, 0..1",
    ),
    Column(
        "max_age_ms",
        BigInteger,
        nullable=True,
        comment="no retry starts later than this after first_dispatched_at",
    ),
    Column(
        "non_retryable_errors", Text, nullable=True, comment="JSON list of error type names never retried"
    ),
    Column(
        "first_dispatched_at", TS, nullable=True, comment="set by the first claim; max_age counts from it"
    ),
    # Migration 0008: occurrences of schedules. The job id is a deterministic function of
    # (schedule uid, nominal time), so planning the same nominal time twice inserts nothing.
    Column("schedule_uid", Uuid, nullable=True, comment="the schedule this job is an occurrence of"),
    Column("schedule_id", String(63), nullable=True, comment="that schedule's id (its resource name part)"),
    Column("nominal_time", TS, nullable=True, comment="the occurrence's nominal fire time (UTC)"),
    Column("coalesced_count", Integer, nullable=True, comment="COALESCE catch-up run: missed nominal times"),
    Column("coalesced_first", TS, nullable=True, comment="COALESCE: earliest missed nominal time"),
    Column("coalesced_last", TS, nullable=True, comment="COALESCE: latest missed nominal time"),
    # Migration 0015: the job's trace (docs/tracing.md), written only while tracing is on.
    Column(
        "trace_context",
        Text,
        nullable=True,
        comment="W3C traceparent, then a newline and the tracestate if any; NULL: not traced",
    ),
    # Migration 0020: request-id uniqueness covers the jobs that have one; the creates name its
    # predicate in ``ON CONFLICT (namespace, request_id) WHERE request_id IS NOT NULL``.
    Index(
        "uq_jobs_request_id",
        "namespace",
        "request_id",
        unique=True,
        postgresql_where=text("request_id IS NOT NULL"),
    ),
    # The due index: a claim is per (namespace, queue) with credits, so it walks exactly that queue's
    # SCHEDULED rows of the region in scheduled_at order (a backlog on another queue is never
    # scanned); shard is in the key so the owned-shards filter is answered from the index.
    # Migration 0014: partial indexes. Every state change of a job is a non-HOT update, which adds an
    # entry to every index whose predicate the new row meets; a job passes SCHEDULED -> QUEUED ->
    # RUNNING -> SUCCEEDED, and only its SCHEDULED version belongs in the due index (queries name the
    # state inline with state_is, so generic plans can use it).
    Index(
        "ix_jobs_due",
        *("region", "namespace", "queue", "scheduled_at", "shard"),
        postgresql_where=text("state = 'SCHEDULED'"),
    ),
    Index(None, "namespace", "created_at"),
    # The reaper's expiry of undispatched jobs past their deadline (most jobs have none).
    Index(
        "ix_jobs_deadline",
        "region",
        "deadline",
        postgresql_where=text("state = 'SCHEDULED' AND deadline IS NOT NULL"),
    ),
    # The DLQ listing and replay walk one namespace's DEAD rows in finished_at order; namespace quotas
    # count its SCHEDULED and QUEUED rows. Migration 0020: those states only (SUCCEEDED, CANCELLED,
    # EXPIRED and RUNNING rows are read through other indexes); readers name the states inline.
    Index(
        "ix_jobs_pending_dead",
        *("namespace", "state", "finished_at"),
        postgresql_where=text(f"state IN {PENDING_DEAD_SQL}"),
    ),
    # Overlap policies read the active occurrences of a schedule (one-time jobs have no schedule);
    # migration 0020: the active ones only, named inline by the readers.
    Index(
        "ix_jobs_schedule",
        "schedule_uid",
        "state",
        postgresql_where=text(f"schedule_uid IS NOT NULL AND state IN {ACTIVE_SQL}"),
    ),
    # Retention: the reaper walks finished jobs oldest first instead of scanning every terminal row.
    Index("ix_jobs_finished", "region", "finished_at", postgresql_where=text("finished_at IS NOT NULL")),
)

#: One row per attempt: the claim, the lease, the outcome.
attempts = Table(
    "attempts",
    metadata,
    Column("job_id", Uuid, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("region", String(32), nullable=False),
    Column("shard", Integer, nullable=False),
    Column(
        "token", BigInteger, nullable=False, comment="fencing token it was claimed (or re-published) under"
    ),
    Column("version", BigInteger, nullable=False, comment="job version at claim"),
    Column("state", String(16), nullable=False, comment="QUEUED RUNNING SUCCEEDED FAILED LOST CANCELLED"),
    Column("dispatcher_id", String(128), nullable=False),
    Column("worker_id", String(128), nullable=True),
    Column(
        "owner",
        String(128),
        nullable=True,
        comment="principal whose worker accepted it (migration 0011); only it may write to the attempt",
    ),
    Column("claimed_at", TS, nullable=False),
    Column("accepted_at", TS, nullable=True),
    Column("lease_ms", Integer, nullable=False, comment="lease duration, ms; each heartbeat extends by it"),
    Column("lease_expires_at", TS, nullable=False),
    Column("finished_at", TS, nullable=True),
    Column("failure_class", String(16), nullable=True),
    Column("error", Text, nullable=True),
    Column(
        "cancel_requested",
        Boolean,
        nullable=False,
        server_default=false(),
        comment="pushed to the worker in heartbeat acks",
    ),
    # Migration 0005: the job's queue, so the circuit breaker (attempts finished in a window) reads
    # one queue's index range.
    Column("namespace", String(63), nullable=False),
    Column("queue", String(64), nullable=False),
    # (migration 0020 dropped the (region, namespace, queue, claimed_at) index: ``queue_claims``)
    # The breaker reads finished attempts of a window; unfinished ones are not indexed (0014).
    Index(
        "ix_attempts_finished",
        "region",
        "namespace",
        "queue",
        "finished_at",
        postgresql_where=text("finished_at IS NOT NULL"),
    ),
    # Migration 0020: the open attempts (QUEUED or RUNNING, finished_at NULL), by shard and claim
    # time: the relay's outbox scan (QUEUED, oldest claim first) and the reaper's lease and
    # start_to_close scans (RUNNING) read it with ``finished_at IS NULL`` in their WHERE. No index
    # holds ``state``, ``lease_expires_at``, ``token``, ``owner``, ``worker_id`` or
    # ``accepted_at``, so the accept, the heartbeat and the relay's re-stamp are HOT updates (with
    # the free space the fillfactor leaves); only the claim's insert and the result add entries.
    Index("ix_attempts_open", "region", "shard", "claimed_at", postgresql_where=text("finished_at IS NULL")),
)
with_fillfactor(attempts, ATTEMPTS_FILLFACTOR)

#: Attempts claimed per queue per second (migration 0020): the retry budget's window counts read
#: these instead of an index on ``attempts.claimed_at``. Each claim adds
#: its counts in its own transaction (one upsert per claim, a row per queue it took from); one row
#: per (queue, second, dispatcher), so dispatchers never wait on each other's counter rows. The
#: reaper deletes rows older than ``gnomon.common.storage.queue_counts.KEPT_S``.
queue_claims = Table(
    "queue_claims",
    metadata,
    Column("region", String(32), primary_key=True),
    Column("namespace", String(63), primary_key=True),
    Column("queue", String(64), primary_key=True),
    Column("bucket_start", TS, primary_key=True, comment="the claims' second: date_trunc('second', now())"),
    Column("dispatcher_id", String(128), primary_key=True, comment="the claiming dispatcher"),
    Column("first_attempts", BigInteger, nullable=False, comment="attempts numbered 1 claimed"),
    Column("retries", BigInteger, nullable=False, comment="attempts numbered 2 and up claimed"),
    Index("ix_queue_claims_bucket", "region", "bucket_start"),  # the reaper's pruning
)
# counts change in place, keys never: room for the new versions keeps the upserts HOT
with_fillfactor(queue_claims, 50)
