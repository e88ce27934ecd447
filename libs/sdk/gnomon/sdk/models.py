"""Plain-Python views of Gnomon resources returned by the client: :class:`Job`, :class:`JobAttempt`,
:class:`DispatcherInfo`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import cluster_service_pb2, job_pb2

from . import convert
from .retry import RetryPolicy

__all__ = ["Job", "JobAttempt", "DispatcherInfo"]

_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "EXPIRED", "SKIPPED"})


@dataclass(frozen=True, slots=True)
class Job:
    """A job as returned by the API (mirror of ``gnomon.v1.Job``).

    Attributes:
        name: ``namespaces/{namespace}/jobs/{id}``.
        queue: queue name.
        payload: opaque payload bytes (see :meth:`json`).
        state: short state name: ``"SCHEDULED"``, ``"QUEUED"``, ``"RUNNING"``, ``"SUCCEEDED"``,
            ``"FAILED"``, ``"DEAD"``, ``"CANCELLED"``, ``"EXPIRED"``, ``"SKIPPED"``
            (``"UNSPECIFIED"``/``"UNKNOWN_<n>"`` only for values this SDK does not know).
        version: bumped by every state transition.
        schedule_time: UTC-aware instant from which the job may run.
        deadline: UTC-aware instant past which an undispatched job expires, or ``None``.
        max_attempts: upper bound on attempts (first try included).
        attempt: current/last attempt number, 1-based; 0 before the first claim.
        idempotency_key: key handed to every attempt.
        create_time, dispatch_time, start_time, finish_time: UTC-aware datetimes or ``None``.
        last_error: last error reported by a worker ("" when none).
        region: home region.
        request_id: the create's ``request_id`` ("" when none).
        lease_duration: lease granted per attempt (``timedelta``) or ``None``.
        idempotent: an attempt with an unknown outcome may be retried.
        failure_class: class of the last failure ("" if none).
        retry_policy: the :class:`~gnomon.sdk.RetryPolicy` in effect (defaults filled in by the
            server), or ``None`` from a server that does not send it.
    """

    name: str
    queue: str
    payload: bytes
    state: str
    version: int
    schedule_time: datetime | None
    deadline: datetime | None
    max_attempts: int
    attempt: int
    idempotency_key: str
    create_time: datetime | None
    dispatch_time: datetime | None
    start_time: datetime | None
    finish_time: datetime | None
    last_error: str
    region: str
    request_id: str
    lease_duration: timedelta | None
    idempotent: bool = False
    failure_class: str = ""
    retry_policy: RetryPolicy | None = None

    @classmethod
    def from_proto(cls, msg: job_pb2.Job) -> Job:
        """Builds a :class:`Job` from a ``gnomon.v1.Job`` message."""
        t = convert.field_time
        return cls(
            name=msg.name,
            queue=msg.queue,
            payload=bytes(msg.payload),
            state=convert.state_name(msg.state),
            version=msg.version,
            schedule_time=t(msg, "schedule_time"),
            deadline=t(msg, "deadline"),
            max_attempts=msg.max_attempts,
            attempt=msg.attempt,
            idempotency_key=msg.idempotency_key,
            create_time=t(msg, "create_time"),
            dispatch_time=t(msg, "dispatch_time"),
            start_time=t(msg, "start_time"),
            finish_time=t(msg, "finish_time"),
            last_error=msg.last_error,
            region=msg.region,
            request_id=msg.request_id,
            lease_duration=convert.field_duration(msg, "lease_duration"),
            idempotent=msg.idempotent,
            failure_class=msg.failure_class,
            retry_policy=RetryPolicy.from_proto(msg.retry_policy) if msg.HasField("retry_policy") else None,
        )

    @property
    def id(self) -> str:
        """The job id (last segment of :attr:`name`)."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> str:
        """The namespace id (``x`` in ``namespaces/x/jobs/...``); "" if the name is malformed."""
        parts = self.name.split("/")
        return parts[1] if len(parts) >= 2 and parts[0] == "namespaces" else ""

    @property
    def terminal(self) -> bool:
        """True if :attr:`state` is terminal (SUCCEEDED, FAILED, DEAD, CANCELLED, EXPIRED, SKIPPED)."""
        return self.state in _TERMINAL

    def json(self) -> Any:
        """The payload decoded as UTF-8 JSON.

        Raises:
            ValueError: the payload is not UTF-8 JSON.
        """
        return convert.decode_json_payload(self.payload)

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field.

        Instants are RFC 3339 UTC strings (``"2026-03-08T07:30:00Z"``) or ``None``;
        ``lease_duration`` is protobuf-JSON style (``"30s"``) or ``None``; ``payload`` is standard
        base64, and ``payload_json`` (the decoded value) is present only when the payload is UTF-8
        JSON.
        """
        r = convert.rfc3339
        out: dict[str, Any] = {
            "name": self.name,
            "id": self.id,
            "queue": self.queue,
            "state": self.state,
            "version": self.version,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "schedule_time": r(self.schedule_time),
            "deadline": r(self.deadline),
            "create_time": r(self.create_time),
            "dispatch_time": r(self.dispatch_time),
            "start_time": r(self.start_time),
            "finish_time": r(self.finish_time),
            "idempotency_key": self.idempotency_key,
            "last_error": self.last_error,
            "region": self.region,
            "request_id": self.request_id,
            "lease_duration": convert.duration_text(self.lease_duration),
            "idempotent": self.idempotent,
            "failure_class": self.failure_class,
            "retry_policy": self.retry_policy.to_json_dict() if self.retry_policy else None,
            "payload": convert.b64(self.payload),
        }
        if self.payload:
            sentinel = object()
            value = convert.decode_json_payload(self.payload, default=sentinel)
            if value is not sentinel:
                out["payload_json"] = value
        return out


def _attempt_state(value: int) -> str:
    """``AttemptState`` number -> short name (``5`` -> ``"LOST"``; unknown -> ``"UNKNOWN_<n>"``)."""
    try:
        return job_pb2.AttemptState.Name(value).removeprefix("ATTEMPT_STATE_")
    except ValueError:
        return f"UNKNOWN_{value}"


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One attempt of a job, as listed by :meth:`Client.list_job_attempts` (mirror of
    ``gnomon.v1.JobAttempt``).

    Attributes:
        name: ``namespaces/{namespace}/jobs/{id}/attempts/{attempt}``.
        attempt: 1-based attempt number.
        state: ``"QUEUED"``, ``"RUNNING"``, ``"SUCCEEDED"``, ``"FAILED"``, ``"LOST"`` (lease
            expired while running: outcome unknown) or ``"CANCELLED"``.
        worker_id: the worker that accepted it ("" if none did).
        dispatcher_id: the dispatcher that claimed it.
        fencing_token: token it was claimed (or re-published) under.
        version: job version at claim.
        failure_class: for FAILED/LOST attempts ``"TRANSIENT"``, ``"THROTTLED"``, ``"PERMANENT"``
            or ``"AMBIGUOUS"``; else "".
        error: for FAILED/LOST attempts the error text; else "".
        claim_time, accept_time, finish_time, lease_expire_time: UTC-aware datetimes or ``None``.
        cancel_requested: cancellation of this attempt was requested while it ran.
    """

    name: str
    attempt: int
    state: str
    worker_id: str
    dispatcher_id: str
    fencing_token: int
    version: int
    failure_class: str
    error: str
    claim_time: datetime | None
    accept_time: datetime | None
    finish_time: datetime | None
    lease_expire_time: datetime | None
    cancel_requested: bool = False

    @classmethod
    def from_proto(cls, msg: job_pb2.JobAttempt) -> JobAttempt:
        """Builds a :class:`JobAttempt` from a ``gnomon.v1.JobAttempt`` message."""
        t = convert.field_time
        return cls(
            name=msg.name,
            attempt=msg.attempt,
            state=_attempt_state(msg.state),
            worker_id=msg.worker_id,
            dispatcher_id=msg.dispatcher_id,
            fencing_token=msg.fencing_token,
            version=msg.version,
            failure_class=msg.failure_class,
            error=msg.error,
            claim_time=t(msg, "claim_time"),
            accept_time=t(msg, "accept_time"),
            finish_time=t(msg, "finish_time"),
            lease_expire_time=t(msg, "lease_expire_time"),
            cancel_requested=msg.cancel_requested,
        )

    @property
    def job(self) -> str:
        """The job's name (``namespaces/{namespace}/jobs/{id}``)."""
        return self.name.rsplit("/attempts/", 1)[0]

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field (instants as RFC 3339 UTC strings or ``None``)."""
        r = convert.rfc3339
        return {
            "name": self.name,
            "attempt": self.attempt,
            "state": self.state,
            "worker_id": self.worker_id,
            "dispatcher_id": self.dispatcher_id,
            "fencing_token": self.fencing_token,
            "version": self.version,
            "failure_class": self.failure_class,
            "error": self.error,
            "claim_time": r(self.claim_time),
            "accept_time": r(self.accept_time),
            "finish_time": r(self.finish_time),
            "lease_expire_time": r(self.lease_expire_time),
            "cancel_requested": self.cancel_requested,
        }


@dataclass(frozen=True, slots=True)
class DispatcherInfo:
    """A live dispatcher, as listed by ``ClusterService.ListDispatchers``.

    Attributes:
        dispatcher_id: instance id.
        region: region served.
        address: ``host:port`` of its WorkerService.
    """

    dispatcher_id: str
    region: str
    address: str

    @classmethod
    def from_proto(cls, msg: cluster_service_pb2.Dispatcher) -> DispatcherInfo:
        """Builds a :class:`DispatcherInfo` from a ``gnomon.v1.Dispatcher`` message."""
        return cls(dispatcher_id=msg.dispatcher_id, region=msg.region, address=msg.address)
