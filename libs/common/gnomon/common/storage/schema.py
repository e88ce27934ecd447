"""The relational schema (SQLAlchemy Core). Alembic migrations must produce exactly this.

SQL stays inside what both PostgreSQL and CockroachDB accept (docs/concepts.md). Instants are
``timestamptz`` (UTC); spans are integer milliseconds. ``region`` is the home-region column
(on CockroachDB the tables become REGIONAL BY ROW on it, see deploy/cockroachdb/).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)

from gnomon.common.storage.schema_base import TS, metadata
from gnomon.common.storage.schema_jobs import attempts, jobs, queue_claims

__all__ = [
    "TS",
    "metadata",
    "jobs",
    "attempts",
    "queue_claims",
    "shard_owners",
    "audit_log",
    "dlq_replays",
    "queue_state",
    "schedules",
    "schedule_occurrences",
    "catchup_budget",
    "queue_limits",
    "region_owners",
]


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
