"""Plain-Python views of Gnomon resources returned by the client: :class:`Job`, :class:`DispatcherInfo`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import cluster_service_pb2, job_pb2

from . import convert

__all__ = ["Job", "DispatcherInfo"]

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

    @classmethod
    def from_proto(cls, msg: job_pb2.Job) -> "Job":
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
            "payload": convert.b64(self.payload),
        }
        if self.payload:
            sentinel = object()
            value = convert.decode_json_payload(self.payload, default=sentinel)
            if value is not sentinel:
                out["payload_json"] = value
        return out


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
    def from_proto(cls, msg: cluster_service_pb2.Dispatcher) -> "DispatcherInfo":
        """Builds a :class:`DispatcherInfo` from a ``gnomon.v1.Dispatcher`` message."""
        return cls(dispatcher_id=msg.dispatcher_id, region=msg.region, address=msg.address)
