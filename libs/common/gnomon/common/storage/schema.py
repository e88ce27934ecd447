"""The relational schema (SQLAlchemy Core). Alembic migrations must produce exactly this.

SQL stays inside what both PostgreSQL and CockroachDB accept (docs/concepts.md). Instants are
``timestamptz`` (UTC); spans are integer milliseconds. ``region`` is the home-region column
(on CockroachDB the tables become REGIONAL BY ROW on it, see deploy/cockroachdb/).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    false,
    func,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TS = DateTime(timezone=True)
_SCHEDULED = text("state = 'SCHEDULED'")


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
    UniqueConstraint("namespace", "request_id"),
    # The due index: a claim is per (namespace, queue) with credits, so it walks exactly that queue's
    # SCHEDULED rows of the region in scheduled_at order (a backlog on another queue is never
    # scanned); shard is in the key so the owned-shards filter is answered from the index.
    # Migration 0014: partial indexes. Every state change of a job is a non-HOT update, which adds an
    # entry to every index whose predicate the new row meets; a job passes SCHEDULED -> QUEUED ->
    # RUNNING -> SUCCEEDED, and only its SCHEDULED version belongs in the due index (queries name the
    # state inline with state_is, so generic plans can use it).
    Index(
        "ix_jobs_due", *("region", "namespace", "queue", "scheduled_at", "shard"), postgresql_where=_SCHEDULED
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
    # count its SCHEDULED and QUEUED rows.
    Index(None, "namespace", "state", "finished_at"),
    # Overlap policies read the active occurrences of a schedule (one-time jobs have no schedule).
    Index("ix_jobs_schedule", "schedule_uid", "state", postgresql_where=text("schedule_uid IS NOT NULL")),
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
    # The reaper's scan for ended leases reads RUNNING attempts only (migration 0014: partial).
    Index(
        "ix_attempts_running_lease", "region", "lease_expires_at", postgresql_where=text("state = 'RUNNING'")
    ),
    # Migration 0005: the job's queue, so the retry budget (attempts claimed in a window) and the
    # circuit breaker (attempts finished in a window) read one queue's index range.
    Column("namespace", String(63), nullable=False),
    Column("queue", String(64), nullable=False),
    Index(None, "region", "namespace", "queue", "claimed_at"),
    # The breaker reads finished attempts of a window; unfinished ones are not indexed (0014).
    Index(
        "ix_attempts_finished",
        "region",
        "namespace",
        "queue",
        "finished_at",
        postgresql_where=text("finished_at IS NOT NULL"),
    ),
    # Migration 0013: a QUEUED attempt is the transactional outbox record (claimed, not accepted);
    # the relay's recovery scan reads them by shard, oldest claim first.
    Index(
        "ix_attempts_queued",
        "region",
        "shard",
        "claimed_at",
        postgresql_where=text("state = 'QUEUED'"),
    ),
)

#: Current owner and fencing token of each shard, as recorded by its owner.
shard_owners = Table(
    "shard_owners",
    metadata,
    Column("region", String(32), primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("token", BigInteger, nullable=False, comment="etcd create revision of the ownership key"),
    Column("owner", String(128), nullable=False),
    Column("acquired_at", TS, nullable=False),
)

#: Audit log: one row per mutating call (migration 0011; before it, DLQ replays only): who, when,
#: what, on which resource, with which outcome.
_AUDIT_COUNT_COMMENT = "calls the entry stands for: 1, or refused calls coalesced (GNOMON_AUDIT_COALESCE_S)"
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Uuid, primary_key=True),
    Column("namespace", String(63), nullable=False),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column(
        "actor", String(512), nullable=False, comment="the authenticated principal (never client-claimed)"
    ),
    Column("action", String(64), nullable=False, comment="the RPC method, e.g. CreateJob"),
    Column("reason", Text, nullable=False),
    Column("request_id", Uuid, nullable=True),
    Column("details", Text, nullable=False, comment="JSON object: filter, limits, counts"),
    Column("resource", String(512), nullable=False, server_default="", comment="the resource name acted on"),
    Column("outcome", String(32), nullable=False, server_default="OK", comment="gRPC status code name"),
    Column("peer", String(128), nullable=False, server_default="", comment="the caller's address"),
    Column("count", Integer, nullable=False, server_default="1", comment=_AUDIT_COUNT_COMMENT),
    Index(None, "namespace", "created_at"),
)

#: One row per DLQ replay request (not dry runs): makes ReplayDeadLetters idempotent by request_id
#: and lets an interrupted replay resume where it stopped.
dlq_replays = Table(
    "dlq_replays",
    metadata,
    Column("namespace", String(63), primary_key=True),
    Column("request_id", Uuid, primary_key=True),
    Column("request_hash", String(64), nullable=False, comment="sha256 of the request without its reason"),
    Column(
        "created_at",
        TS,
        nullable=False,
        server_default=func.now(),
        comment="start of the replay; only dead letters finished by then are matched",
    ),
    Column(
        "matched",
        Integer,
        nullable=False,
        comment="dead letters matching at the start (counted up to 100000)",
    ),
    Column("target", Integer, nullable=False, comment="how many the replay takes: min(matched, max_jobs)"),
    Column("replayed", Integer, nullable=False, comment="new jobs created so far"),
    Column("next_at", TS, nullable=False, comment="earliest schedule time of the next replayed job (pacing)"),
    Column("completed_at", TS, nullable=True),
    Column("job_names", Text, nullable=False, comment="JSON list: names of the first 1000 new jobs"),
)

#: Per-queue circuit breaker (migration 0005): one row per (region, namespace, queue) that a
#: dispatcher evaluated. State changes are compare-and-set on ``version``.
queue_state = Table(
    "queue_state",
    metadata,
    Column("region", String(32), primary_key=True),
    Column("namespace", String(63), primary_key=True),
    Column("queue", String(64), primary_key=True),
    Column("state", String(16), nullable=False, comment="CLOSED OPEN HALF_OPEN"),
    Column("version", BigInteger, nullable=False, comment="bumped by every state change (compare-and-set)"),
    Column("opened_at", TS, nullable=True, comment="when the breaker last opened"),
    Column(
        "updated_at", TS, nullable=False, comment="when the state last changed (the row's creation at first)"
    ),
    Column(
        "failure_ratio",
        Double,
        nullable=False,
        server_default=text("0"),
        comment="failure ratio that made the last transition",
    ),
    Column(
        "window_results",
        Integer,
        nullable=False,
        server_default=text("0"),
        comment="results counted for that ratio",
    ),
    Column("opened_count", BigInteger, nullable=False, server_default=text("0"), comment="times it opened"),
)


#: Recurring schedules (migration 0008): rule, zone, policies, job template, planning state.
#: The planner claims rows whose ``plan_at`` has come with ``FOR UPDATE SKIP LOCKED``.
schedules = Table(
    "schedules",
    metadata,
    Column("namespace", String(63), primary_key=True),
    Column("schedule_id", String(63), primary_key=True),
    Column(
        "uid",
        Uuid,
        nullable=False,
        unique=True,
        comment="fixed at creation; occurrence job ids derive from it",
    ),
    Column("region", String(32), nullable=False),
    Column("rule_kind", String(16), nullable=False, comment="CRON RRULE INTERVAL"),
    Column("expression", Text, nullable=False, comment="cron or RFC 5545 text; empty for INTERVAL"),
    Column("interval_ms", BigInteger, nullable=True),
    Column("time_zone", String(64), nullable=False),
    Column("dst_gap", String(16), nullable=False),
    Column("dst_fold", String(16), nullable=False),
    Column("start_time", TS, nullable=True),
    Column("end_time", TS, nullable=True),
    Column("misfire_policy", String(16), nullable=False),
    Column("misfire_grace_ms", BigInteger, nullable=False),
    Column("catchup_window_ms", BigInteger, nullable=False),
    Column("max_catchup", Integer, nullable=False),
    Column("overlap_policy", String(16), nullable=False),
    Column("jitter_ms", BigInteger, nullable=False),
    # The job template.
    Column("queue", String(64), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("lease_ms", Integer, nullable=False),
    Column("idempotent", Boolean, nullable=False),
    Column("start_to_close_ms", BigInteger, nullable=True),
    Column("start_deadline_ms", BigInteger, nullable=True),
    Column("retry_initial_ms", BigInteger, nullable=False),
    Column("retry_max_ms", BigInteger, nullable=False),
    Column("retry_multiplier", Double, nullable=False),
    Column("retry_jitter", Double, nullable=False),
    Column("max_age_ms", BigInteger, nullable=True),
    Column("non_retryable_errors", Text, nullable=True),
    # Lifecycle and planning state.
    Column("paused", Boolean, nullable=False),
    Column(
        "skip_through",
        TS,
        nullable=True,
        comment="nominal times up to this instant were paused: SKIPPED_PAUSED",
    ),
    Column("version", BigInteger, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("updated_at", TS, nullable=False),
    Column("request_id", Uuid, nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column(
        "planned_through",
        TS,
        nullable=False,
        comment="high-water mark: every nominal time up to this instant is planned",
    ),
    Column(
        "next_fire_at",
        TS,
        nullable=True,
        comment="first nominal time after planned_through; NULL = exhausted",
    ),
    Column(
        "plan_at",
        TS,
        nullable=True,
        comment="when a planner must look at it next; NULL = paused or exhausted",
    ),
    Column("buffered", Integer, nullable=False, comment="occurrences waiting (BUFFERED) to be released"),
    Column(
        "missed_count",
        Integer,
        nullable=False,
        comment="COALESCE: missed nominal times carried over from earlier planning steps",
    ),
    Column("missed_first", TS, nullable=True, comment="COALESCE: earliest of those"),
    UniqueConstraint("namespace", "request_id"),
    Index(None, "region", "plan_at"),
    Index(None, "region", "buffered"),
)

#: One decision record per (schedule, nominal time): fired, late, coalesced, buffered, skipped ...
schedule_occurrences = Table(
    "schedule_occurrences",
    metadata,
    Column("schedule_uid", Uuid, primary_key=True),
    Column("nominal_time", TS, primary_key=True),
    Column("namespace", String(63), nullable=False),
    Column("region", String(32), nullable=False),
    Column("local_time", String(40), nullable=False, comment="RFC 3339 local wall time with offset"),
    Column("decision", String(24), nullable=False),
    Column("source", String(16), nullable=False, comment="RULE TRIGGER BACKFILL"),
    Column("note", Text, nullable=False),
    Column("job_id", Uuid, nullable=True),
    Column("scheduled_at", TS, nullable=True, comment="the job's schedule time"),
    Column("decided_at", TS, nullable=False),
    Column("overlap_policy", String(16), nullable=True, comment="BUFFERED: the policy it is released under"),
    Column("missed_count", Integer, nullable=True),
    Column("missed_first", TS, nullable=True),
    Column("missed_last", TS, nullable=True),
    Column(
        "request_id", Uuid, nullable=True, comment="TriggerSchedule request_id: a repeat returns this record"
    ),
    UniqueConstraint("schedule_uid", "request_id"),
    Index(None, "schedule_uid", "decision", "nominal_time"),
    Index(None, "region", "decided_at"),
)

#: The global catch-up budget (token bucket) of a region: catch-up and backfill runs take the next
#: slot, so recovery from an outage releases them at a bounded rate.
catchup_budget = Table(
    "catchup_budget",
    metadata,
    Column("region", String(32), primary_key=True),
    Column(
        "next_slot_at",
        TS,
        nullable=False,
        comment="the earliest instant the next catch-up run may be released",
    ),
)


#: Per-queue dispatch rate limits (migration 0009): a token bucket per (region, namespace, queue),
#: refilled at ``rate`` tokens per second up to ``burst``. Every dispatcher's claim takes tokens from
#: the row under its lock, so the limit is shared by all dispatchers of the region.
queue_limits = Table(
    "queue_limits",
    metadata,
    Column("region", String(32), primary_key=True),
    Column("namespace", String(63), primary_key=True),
    Column("queue", String(64), primary_key=True),
    Column("rate", Double, nullable=False, comment="tokens (dispatches) added per second"),
    Column("burst", Integer, nullable=False, comment="bucket size: dispatches allowed at once"),
    Column("tokens", Double, nullable=False, comment="tokens left at refilled_at"),
    Column("refilled_at", TS, nullable=False),
    Column("updated_at", TS, nullable=False, comment="when the limit was last set"),
)


#: Which region serves each home region, with the region-level fencing token (migration 0010):
#: normally a region serves itself; during a failover a standby region does, under a larger token
#: (docs/regions.md). Every claim checks its region token against this row.
region_owners = Table(
    "region_owners",
    metadata,
    Column("region", String(32), primary_key=True, comment="the home region"),
    Column("owner_region", String(32), nullable=False, comment="the region whose services act for it"),
    Column("owner", String(128), nullable=False, comment="the dispatcher that took the region lease"),
    Column("token", BigInteger, nullable=False, comment="etcd create revision of the region ownership key"),
    Column("acquired_at", TS, nullable=False),
)

# The tenancy tables register themselves on ``metadata`` (kept in their own module for size).
from gnomon.common.storage import schema_tenancy as _schema_tenancy  # noqa: E402,F401
