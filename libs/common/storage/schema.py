"""The relational schema (SQLAlchemy Core). Alembic migrations must produce exactly this.

SQL stays inside what both PostgreSQL and CockroachDB accept (DESIGN.md section 7). Instants are
``timestamptz`` (UTC); spans are integer milliseconds. ``region`` is the home-region column
(on CockroachDB the tables become REGIONAL BY ROW on it, see deploy/cockroachdb/).
"""
from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, DateTime, Index, Integer, LargeBinary, MetaData, String, Table,
                        Text, UniqueConstraint, Uuid, false, func)

metadata = MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
})

TS = DateTime(timezone=True)

#: One row per job (a one-time job or, later, one occurrence of a schedule).
jobs = Table(
    "jobs", metadata,
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
    Column("attempt", Integer, nullable=False, comment="current/last attempt number, 0 before the first claim"),
    Column("idempotency_key", String(255), nullable=False),
    Column("lease_ms", Integer, nullable=False, comment="lease duration per attempt, ms"),
    Column("request_id", Uuid, nullable=True),
    Column("request_hash", String(64), nullable=True, comment="sha256 of the create request, for request_id reuse"),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column("dispatched_at", TS, nullable=True),
    Column("started_at", TS, nullable=True),
    Column("finished_at", TS, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("idempotent", Boolean, nullable=False, server_default=false(),
           comment="an attempt whose outcome is unknown (lease lost while running) may be retried"),
    Column("failure_class", String(16), nullable=True, comment="class of the last failure"),
    Column("cancel_requested_at", TS, nullable=True, comment="cancellation asked while RUNNING"),
    UniqueConstraint("namespace", "request_id"),
    # The due index: a claim is per (namespace, queue) with credits, so it walks exactly that queue's
    # SCHEDULED rows of the region in scheduled_at order (a backlog on another queue is never
    # scanned); shard is in the key so the owned-shards filter is answered from the index.
    Index(None, "region", "namespace", "queue", "state", "scheduled_at", "shard"),
    Index(None, "namespace", "created_at"),
    Index(None, "region", "state", "deadline"),
)

#: One row per attempt: the claim, the lease, the outcome.
attempts = Table(
    "attempts", metadata,
    Column("job_id", Uuid, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("region", String(32), nullable=False),
    Column("shard", Integer, nullable=False),
    Column("token", BigInteger, nullable=False, comment="fencing token it was claimed (or re-published) under"),
    Column("version", BigInteger, nullable=False, comment="job version at claim"),
    Column("state", String(16), nullable=False, comment="QUEUED RUNNING SUCCEEDED FAILED LOST CANCELLED"),
    Column("dispatcher_id", String(128), nullable=False),
    Column("worker_id", String(128), nullable=True),
    Column("claimed_at", TS, nullable=False),
    Column("accepted_at", TS, nullable=True),
    Column("lease_ms", Integer, nullable=False, comment="lease duration, ms; each heartbeat extends by it"),
    Column("lease_expires_at", TS, nullable=False),
    Column("finished_at", TS, nullable=True),
    Column("failure_class", String(16), nullable=True),
    Column("error", Text, nullable=True),
    Column("cancel_requested", Boolean, nullable=False, server_default=false(),
           comment="pushed to the worker in heartbeat acks"),
    Index(None, "region", "state", "lease_expires_at"),
)

#: The transactional outbox: written with the claim, delivered by the relay.
outbox = Table(
    "outbox", metadata,
    Column("job_id", Uuid, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("region", String(32), nullable=False),
    Column("shard", Integer, nullable=False),
    Column("token", BigInteger, nullable=False),
    Column("queue", String(64), nullable=False),
    Column("created_at", TS, nullable=False),
    Column("published_at", TS, nullable=True),
    Column("publish_count", Integer, nullable=False),
    Index(None, "region", "published_at", "shard"),
)

#: Current owner and fencing token of each shard, as recorded by its owner.
shard_owners = Table(
    "shard_owners", metadata,
    Column("region", String(32), primary_key=True),
    Column("shard", Integer, primary_key=True),
    Column("token", BigInteger, nullable=False, comment="etcd create revision of the ownership key"),
    Column("owner", String(128), nullable=False),
    Column("acquired_at", TS, nullable=False),
)
