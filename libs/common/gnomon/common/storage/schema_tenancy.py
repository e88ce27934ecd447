"""Tables of tenancy and identity (migration 0011): namespaces as resources with quotas, principals,
their API keys (stored hashed) and their role grants per namespace.

They live on :data:`gnomon.common.storage.schema.metadata` (imported at the end of that module, so
every reader of the metadata sees them). docs/security.md describes the model.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Double, Index, Integer, String, Table, Text

from gnomon.common.storage.schema import TS, metadata

#: A namespace: the unit of isolation. Quotas are enforced with RESOURCE_EXHAUSTED; in the job and
#: schedule quotas 0 means "no limit", in the worker-stream quotas NULL means the dispatcher's default
#: (GNOMON_STREAM_QUOTA_*).
namespaces = Table(
    "namespaces",
    metadata,
    Column(
        "name", String(63), primary_key=True, comment="the namespace id (resource name namespaces/{name})"
    ),
    Column("description", Text, nullable=False),
    Column("retention_s", BigInteger, nullable=False, comment="finished jobs are kept this long, seconds"),
    Column("max_create_rate", Double, nullable=False, comment="jobs created per second per API process"),
    Column("max_pending_jobs", BigInteger, nullable=False, comment="jobs SCHEDULED or QUEUED at once"),
    Column("max_schedules", Integer, nullable=False, comment="schedules at once"),
    Column(
        "max_worker_streams",
        Integer,
        nullable=True,
        comment="worker streams per dispatcher process; NULL: the default",
    ),
    Column(
        "max_queues_per_hello",
        Integer,
        nullable=True,
        comment="queues one worker stream may name; NULL: the default",
    ),
    Column(
        "max_worker_streams_per_principal",
        Integer,
        nullable=True,
        comment="worker streams of one principal per dispatcher process; NULL: default",
    ),
    Column(
        "max_queues_per_principal",
        Integer,
        nullable=True,
        comment="distinct queues one principal's streams serve per dispatcher; NULL: default",
    ),
    Column(
        "max_streamed_queues",
        Integer,
        nullable=True,
        comment="distinct queues the namespace's streams serve per dispatcher; NULL: default",
    ),
    Column("version", BigInteger, nullable=False, comment="bumped by every update (the etag)"),
    Column("created_at", TS, nullable=False),
    Column("updated_at", TS, nullable=False),
)

#: Someone or something that calls Gnomon: a person, an application, a worker fleet or a service.
principals = Table(
    "principals",
    metadata,
    Column("name", String(128), primary_key=True, comment="also the CN of its client certificate, if any"),
    Column("description", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("disabled_at", TS, nullable=True, comment="set: every credential of it is refused"),
)

#: API keys: ``gnk_{id}_{secret}``; only SHA-256 of the secret is stored (it is shown once).
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True, comment="the public part of the key"),
    Column("principal", String(128), nullable=False),
    Column("secret_sha256", String(64), nullable=False, comment="hex SHA-256 of the secret part"),
    Column("description", Text, nullable=False),
    Column("created_at", TS, nullable=False),
    Column("expires_at", TS, nullable=True),
    Column("revoked_at", TS, nullable=True),
    Index(None, "principal"),
)

#: A role of a principal in a namespace (``*``: every namespace). Worker grants name their queues.
grants = Table(
    "grants",
    metadata,
    Column("principal", String(128), primary_key=True),
    Column("namespace", String(63), primary_key=True, comment="a namespace id, or * for every namespace"),
    Column("role", String(16), primary_key=True, comment="admin operator client worker reader"),
    Column("queues", Text, nullable=False, comment='worker role: JSON list of queue names, or ["*"]'),
    Column("created_at", TS, nullable=False),
    Index(None, "namespace"),
)
