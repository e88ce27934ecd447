"""The dead-letter queue in the SDK: models and requests behind ``Client.list_dead_letters``,
``Client.replay_dead_letters`` and ``Client.list_audit_entries`` (and their ``AsyncClient`` twins).

Authorization and audit ride on call metadata, which :class:`~gnomon.sdk.Client` sends with every
RPC (its ``metadata`` argument): ``x-gnomon-actor`` names you in the audit log (next to your
address); ``x-gnomon-namespaces`` is normally set by a gateway in front of the API.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as pb_grpc

from . import convert
from .errors import GnomonError
from .models import Job

__all__ = [
    "DeadLetter",
    "DeadLetterAttempt",
    "ReplayResult",
    "AuditEntry",
    "list_dead_letters_request",
    "replay_dead_letters_request",
    "list_audit_entries_request",
    "ACTOR_HEADER",
    "NAMESPACES_HEADER",
]

#: Call metadata key: who you are, recorded in the audit log.
ACTOR_HEADER = "x-gnomon-actor"
#: Call metadata key: namespaces the caller may act on (comma-separated; set by a trusted gateway).
NAMESPACES_HEADER = "x-gnomon-namespaces"


@dataclass(frozen=True, slots=True)
class DeadLetterAttempt:
    """One attempt of a dead letter (mirror of ``gnomon.v1.DeadLetterAttempt``): ``attempt``
    (1-based), ``state`` (QUEUED RUNNING SUCCEEDED FAILED LOST CANCELLED), ``failure_class``,
    ``error``, ``worker_id`` ("" if never accepted), ``fencing_token``, and UTC ``claim_time``,
    ``start_time``, ``finish_time`` (``None`` when unset)."""

    attempt: int
    state: str
    failure_class: str
    error: str
    worker_id: str
    fencing_token: int
    claim_time: datetime | None
    start_time: datetime | None
    finish_time: datetime | None

    @classmethod
    def from_proto(cls, m: pb.DeadLetterAttempt) -> DeadLetterAttempt:
        """Builds it from a ``gnomon.v1.DeadLetterAttempt``."""
        t = convert.field_time
        return cls(
            attempt=m.attempt,
            state=m.state,
            failure_class=m.failure_class,
            error=m.error,
            worker_id=m.worker_id,
            fencing_token=m.fencing_token,
            claim_time=t(m, "claim_time"),
            start_time=t(m, "start_time"),
            finish_time=t(m, "finish_time"),
        )

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (instants as RFC 3339 UTC strings or ``None``)."""
        r = convert.rfc3339
        return {
            "attempt": self.attempt,
            "state": self.state,
            "failure_class": self.failure_class,
            "error": self.error,
            "worker_id": self.worker_id,
            "fencing_token": self.fencing_token,
            "claim_time": r(self.claim_time),
            "start_time": r(self.start_time),
            "finish_time": r(self.finish_time),
        }


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead job with its most recent attempts (at most 10, oldest first). ``replay_of``: the job it
    was itself replayed from ("" if none); ``replayed_by``: the job replaying it ("" if not yet)."""

    job: Job
    attempts: list[DeadLetterAttempt]
    replay_of: str = ""
    replayed_by: str = ""

    @classmethod
    def from_proto(cls, m: pb.DeadLetter) -> DeadLetter:
        """Builds it from a ``gnomon.v1.DeadLetter``."""
        return cls(
            job=Job.from_proto(m.job),
            attempts=[DeadLetterAttempt.from_proto(a) for a in m.attempts],
            replay_of=m.replay_of,
            replayed_by=m.replayed_by,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the job's fields (see ``Job.to_json_dict``) plus ``attempts``,
        ``replay_of`` and ``replayed_by``."""
        return {
            **self.job.to_json_dict(),
            "attempts": [a.to_json_dict() for a in self.attempts],
            "replay_of": self.replay_of,
            "replayed_by": self.replayed_by,
        }


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What ``replay_dead_letters`` did: ``matched`` dead letters (counted up to 100000),
    ``replayed`` new jobs (0 for a dry run), the names of the first 1000 in schedule order,
    ``dry_run``, and the ``request_id`` used (repeat the call with it to get the same answer, or to
    finish an interrupted replay)."""

    matched: int
    replayed: int
    job_names: list[str]
    dry_run: bool
    request_id: str


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit log entry: ``name``, UTC ``create_time``, ``actor`` ("x-gnomon-actor (peer)" or the
    peer), ``action`` (``dead_letters.replay`` or ``dead_letters.replay.dry_run``), ``reason``,
    ``request_id`` and ``details`` (the decoded JSON object: filter, limits, counts)."""

    name: str
    create_time: datetime | None
    actor: str
    action: str
    reason: str
    request_id: str
    details: dict

    @classmethod
    def from_proto(cls, m: pb.AuditEntry) -> AuditEntry:
        """Builds it from a ``gnomon.v1.AuditEntry``."""
        try:
            details = json.loads(m.details) if m.details else {}
        except ValueError:
            details = {"raw": m.details}
        return cls(
            name=m.name,
            create_time=convert.field_time(m, "create_time"),
            actor=m.actor,
            action=m.action,
            reason=m.reason,
            request_id=m.request_id,
            details=details,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "name": self.name,
            "create_time": convert.rfc3339(self.create_time),
            "actor": self.actor,
            "action": self.action,
            "reason": self.reason,
            "request_id": self.request_id,
            "details": self.details,
        }


def _filters(req, queue, failure_class, error_contains, start_time, end_time) -> None:
    req.queue = queue or ""
    req.failure_class = (failure_class or "").upper()
    req.error_contains = error_contains or ""
    if start_time is not None:
        req.start_time.CopyFrom(convert.to_timestamp(start_time))
    if end_time is not None:
        req.end_time.CopyFrom(convert.to_timestamp(end_time))


def list_dead_letters_request(
    namespace: str,
    *,
    queue: str | None = None,
    failure_class: str | None = None,
    error_contains: str | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    include_replayed: bool = False,
    page_size: int = 100,
    page_token: str = "",
) -> pb.ListDeadLettersRequest:
    """Builds a ``ListDeadLettersRequest`` (argument meanings: :meth:`gnomon.sdk.Client.list_dead_letters`).

    Raises:
        TypeError, ValueError: a time that is not an aware ``datetime``.
    """
    req = pb.ListDeadLettersRequest(
        parent=convert.namespace_parent(namespace),
        include_replayed=include_replayed,
        page_size=int(page_size),
        page_token=page_token or "",
    )
    _filters(req, queue, failure_class, error_contains, start_time, end_time)
    return req


def replay_dead_letters_request(
    namespace: str,
    *,
    max_rate: float,
    max_jobs: int,
    reason: str,
    queue: str | None = None,
    failure_class: str | None = None,
    error_contains: str | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    dry_run: bool = False,
    request_id: str | uuid.UUID | None = None,
) -> pb.ReplayDeadLettersRequest:
    """Builds a ``ReplayDeadLettersRequest``; a missing ``request_id`` gets a fresh UUID.

    Raises:
        TypeError, ValueError: a time that is not an aware ``datetime``.
    """
    req = pb.ReplayDeadLettersRequest(
        parent=convert.namespace_parent(namespace),
        max_rate=float(max_rate),
        max_jobs=int(max_jobs),
        dry_run=bool(dry_run),
        reason=reason,
        request_id=str(request_id or uuid.uuid4()),
    )
    _filters(req, queue, failure_class, error_contains, start_time, end_time)
    return req


def list_audit_entries_request(
    namespace: str, page_size: int = 100, page_token: str = ""
) -> pb.ListAuditEntriesRequest:
    """Builds a ``ListAuditEntriesRequest``."""
    return pb.ListAuditEntriesRequest(
        parent=convert.namespace_parent(namespace), page_size=int(page_size), page_token=page_token or ""
    )


def stub(client) -> pb_grpc.DeadLetterServiceStub:
    """The (cached) ``DeadLetterService`` stub on a client's channel."""
    s = getattr(client, "_dlq_stub", None)
    if s is None:
        s = client._dlq_stub = pb_grpc.DeadLetterServiceStub(client._channel)
    return s


def replay_result(resp: pb.ReplayDeadLettersResponse, request_id: str) -> ReplayResult:
    """A ``ReplayDeadLettersResponse`` -> :class:`ReplayResult`."""
    return ReplayResult(
        matched=resp.matched_count,
        replayed=resp.replayed_count,
        job_names=list(resp.replayed_jobs),
        dry_run=resp.dry_run,
        request_id=request_id,
    )


def call(client, method: str, request, timeout: float | None = None):
    """Calls ``DeadLetterService.<method>`` through a sync client (its metadata; ``timeout`` or the
    client's). Raises :class:`~gnomon.sdk.errors.GnomonError` when the RPC fails."""
    try:
        return getattr(stub(client), method)(
            request, timeout=timeout or client.timeout, metadata=client._metadata or None
        )
    except grpc.RpcError as err:
        raise GnomonError.from_rpc_error(err) from None


async def acall(client, method: str, request, timeout: float | None = None):
    """Async :func:`call` for an ``AsyncClient``."""
    try:
        return await getattr(stub(client), method)(
            request, timeout=timeout or client.timeout, metadata=client._metadata or None
        )
    except grpc.RpcError as err:
        raise GnomonError.from_rpc_error(err) from None
