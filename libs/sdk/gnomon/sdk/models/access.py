"""Namespaces and access (``NamespaceService``, ``AccessService``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["NamespaceQuotas", "Namespace", "Principal", "ApiKey", "CreatedApiKey", "Grant", "WhoAmI"]


@dataclass(frozen=True, slots=True)
class NamespaceQuotas:
    """A namespace's limits. In the job and schedule limits 0 means no limit; in the worker-stream
    limits (the last five) 0 means the dispatcher's default (``GNOMON_STREAM_QUOTA_*``), each counted
    per dispatcher process.

    Attributes:
        max_create_rate: jobs created per second per API server.
        max_pending_jobs: jobs SCHEDULED or QUEUED at once.
        max_schedules: schedules at once.
        max_worker_streams: worker streams of the namespace on one dispatcher at once (default 256).
        max_queues_per_hello: queues one worker stream may name (default 64, at most 100).
        max_worker_streams_per_principal: worker streams of one principal in the namespace on one
            dispatcher at once (default 64).
        max_queues_per_principal: distinct queues one principal's streams serve together on one
            dispatcher (default 64).
        max_streamed_queues: distinct queues the namespace's streams serve together on one
            dispatcher (default 64).
    """

    max_create_rate: float = 0.0
    max_pending_jobs: int = 0
    max_schedules: int = 0
    max_worker_streams: int = 0
    max_queues_per_hello: int = 0
    max_worker_streams_per_principal: int = 0
    max_queues_per_principal: int = 0
    max_streamed_queues: int = 0


@dataclass(frozen=True, slots=True)
class Namespace:
    """A namespace. ``name`` is ``namespaces/{id}``; ``retention`` how long finished jobs are kept
    (``timedelta(0)``: the cluster default); ``etag`` for conditional updates and deletes."""

    name: str
    description: str
    retention: timedelta | None
    quotas: NamespaceQuotas
    create_time: datetime | None
    update_time: datetime | None
    etag: str

    @property
    def id(self) -> str:
        """The namespace id (``name`` without ``namespaces/``)."""
        return self.name.removeprefix("namespaces/")


@dataclass(frozen=True, slots=True)
class Grant:
    """A role of ``principal`` (``principals/{id}``) in ``namespace`` (an id or ``"*"``): ``role`` is
    ``"ADMIN"``, ``"OPERATOR"``, ``"CLIENT"``, ``"WORKER"`` or ``"READER"``; ``queues`` only for
    workers (``("*",)``: all); ``create_time`` None for grants of a JWT."""

    principal: str
    namespace: str
    role: str
    queues: tuple[str, ...]
    create_time: datetime | None


@dataclass(frozen=True, slots=True)
class Principal:
    """A principal: ``name`` is ``principals/{id}``; ``disable_time`` None while enabled; ``grants``
    filled by ``get_principal`` only."""

    name: str
    description: str
    create_time: datetime | None
    disable_time: datetime | None
    grants: tuple[Grant, ...]

    @property
    def id(self) -> str:
        """The principal id (``name`` without ``principals/``)."""
        return self.name.removeprefix("principals/")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key without its secret: ``name`` ``principals/{p}/apiKeys/{id}``, ``id`` (16 hex
    digits), ``expire_time`` None = never, ``revoke_time`` None = not revoked."""

    name: str
    id: str
    description: str
    create_time: datetime | None
    expire_time: datetime | None
    revoke_time: datetime | None


@dataclass(frozen=True, slots=True)
class CreatedApiKey:
    """A key just created: ``key`` and its ``token`` (``gnk_{id}_{secret}``), shown only once."""

    key: ApiKey
    token: str


@dataclass(frozen=True, slots=True)
class WhoAmI:
    """The caller as the server sees it: ``principal`` (``principals/{id}``), ``kind`` (``"API_KEY"``,
    ``"JWT"``, ``"CERTIFICATE"``, ``"SERVICE"`` or ``"INSECURE"``) and its ``grants``."""

    principal: str
    kind: str
    grants: tuple[Grant, ...]
