"""The error catalogue: domain errors, each with a gRPC code and an UPPER_SNAKE ``reason``.

Servicers raise these; :mod:`gnomon.common.rpc.errors` turns them into ``google.rpc.Status`` with an
``ErrorInfo`` (domain :data:`DOMAIN`) and, for validation, a ``google.rpc.BadRequest``
(https://google.aip.dev/193). Every reason is listed in :data:`REASONS` and in ``docs/errors.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from gnomon.common.domain.reasons import ErrorReason

DOMAIN = "gnomon.dev"

#: reason -> (gRPC code, one-line meaning). The single source for docs/errors.md.
REASONS: dict[ErrorReason, tuple[grpc.StatusCode, str]] = {
    ErrorReason.INVALID_FIELD: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "One or more request fields are invalid; see BadRequest.",
    ),
    ErrorReason.JOB_NOT_FOUND: (grpc.StatusCode.NOT_FOUND, "No job with that name in that namespace."),
    ErrorReason.REQUEST_ID_REUSED: (
        grpc.StatusCode.ALREADY_EXISTS,
        "The request_id was already used with a different request.",
    ),
    ErrorReason.STALE_FENCING_TOKEN: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The write carried a fencing token older than the current shard owner's.",
    ),
    ErrorReason.STALE_ATTEMPT: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The attempt or version is no longer current (cancelled, re-dispatched or finished).",
    ),
    ErrorReason.LEASE_EXPIRED: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The attempt's lease ended before the write.",
    ),
    ErrorReason.STALE_VERSION: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The job is no longer at the request's expected_version; nothing was changed.",
    ),
    ErrorReason.JOB_NOT_RESCHEDULABLE: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "Only a job not yet dispatched (SCHEDULED) can be rescheduled.",
    ),
    ErrorReason.CONCURRENT_MODIFICATION: (
        grpc.StatusCode.ABORTED,
        "The job changed concurrently while the request was applied; read it and retry.",
    ),
    ErrorReason.DATABASE_UNAVAILABLE: (
        grpc.StatusCode.UNAVAILABLE,
        "The database cannot be reached; retry later.",
    ),
    ErrorReason.COORDINATION_UNAVAILABLE: (
        grpc.StatusCode.UNAVAILABLE,
        "etcd cannot be reached; retry later.",
    ),
    ErrorReason.SHUTTING_DOWN: (grpc.StatusCode.UNAVAILABLE, "The server is draining; reconnect elsewhere."),
    ErrorReason.AUDIT_UNAVAILABLE: (
        grpc.StatusCode.UNAVAILABLE,
        "The server's audit log buffer is full (`GNOMON_AUDIT_BUFFER_ROWS`: the database cannot keep up): "
        "the call was not run, since it could not be audited; retry later.",
    ),
    ErrorReason.LISTINGS_BUSY: (
        grpc.StatusCode.UNAVAILABLE,
        "The caller already has as many payload listings running on this API server as it may "
        "(GNOMON_LIST_CONCURRENCY_PER_PRINCIPAL) and none ended within GNOMON_LIST_WAIT_S; retry later.",
    ),
    ErrorReason.PROTOCOL_VIOLATION: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "A stream message came out of protocol order.",
    ),
    ErrorReason.CHECKPOINT_TOO_LARGE: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "A progress checkpoint exceeds 64 KiB; it was refused whole, never truncated.",
    ),
    ErrorReason.NAMESPACE_NOT_ALLOWED: (
        grpc.StatusCode.PERMISSION_DENIED,
        "The caller holds no role in that namespace that allows this method (whether or not the "
        "resource exists).",
    ),
    ErrorReason.UNAUTHENTICATED: (
        grpc.StatusCode.UNAUTHENTICATED,
        "No valid credential: missing, malformed, unknown, expired, revoked or of a disabled principal.",
    ),
    ErrorReason.QUEUE_NOT_GRANTED: (
        grpc.StatusCode.PERMISSION_DENIED,
        "The worker's principal is not granted a queue its hello names.",
    ),
    ErrorReason.SCHEDULE_NOT_FOUND: (
        grpc.StatusCode.NOT_FOUND,
        "No schedule with that name in that namespace.",
    ),
    ErrorReason.SCHEDULE_EXISTS: (
        grpc.StatusCode.ALREADY_EXISTS,
        "A schedule with that schedule_id exists in the namespace.",
    ),
    ErrorReason.INVALID_CRON: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The cron expression does not parse; the message names the field and its position.",
    ),
    ErrorReason.INVALID_RRULE: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The RFC 5545 text does not parse; the message names the faulty part.",
    ),
    ErrorReason.INVALID_INTERVAL: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The interval is outside 1 s .. 366 days.",
    ),
    ErrorReason.INVALID_TIME_ZONE: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The time zone is not an IANA zone name known to tzdata.",
    ),
    ErrorReason.RULE_NEVER_FIRES: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The rule has no fire time (e.g. Feb 30) within the bounded search.",
    ),
    ErrorReason.RRULE_UNBOUNDED: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The RRULE would expand without bound or too expensively to evaluate.",
    ),
    ErrorReason.RULE_TOO_EXPENSIVE: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Finding the rule's next fire time exceeds the bounded work of one search (rare BY-filters).",
    ),
    ErrorReason.INVALID_TIME_RANGE: (grpc.StatusCode.INVALID_ARGUMENT, "end_time is not after start_time."),
    ErrorReason.MALFORMED_REQUEST: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The request body is not a valid protobuf message of the method's request type.",
    ),
    ErrorReason.INVALID_ITEM: (
        grpc.StatusCode.INVALID_ARGUMENT,
        "The database refused this one item of a batched write (e.g. a NUL in a text); the rest committed.",
    ),
    ErrorReason.NAMESPACE_NOT_FOUND: (
        grpc.StatusCode.NOT_FOUND,
        "No namespace with that id (jobs may still be created in it: a namespace needs no row).",
    ),
    ErrorReason.NAMESPACE_EXISTS: (grpc.StatusCode.ALREADY_EXISTS, "A namespace with that id exists."),
    ErrorReason.NAMESPACE_NOT_EMPTY: (
        grpc.StatusCode.FAILED_PRECONDITION,
        "The namespace still has jobs SCHEDULED or QUEUED, or schedules; it was not deleted.",
    ),
    ErrorReason.PRINCIPAL_NOT_FOUND: (grpc.StatusCode.NOT_FOUND, "No principal with that id."),
    ErrorReason.PRINCIPAL_EXISTS: (grpc.StatusCode.ALREADY_EXISTS, "A principal with that id exists."),
    ErrorReason.API_KEY_NOT_FOUND: (
        grpc.StatusCode.NOT_FOUND,
        "No API key with that id for that principal.",
    ),
    ErrorReason.QUOTA_EXCEEDED: (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "A namespace quota would be exceeded; nothing was written. RetryInfo says when to retry; "
        "ErrorInfo metadata names the quota, its limit and the namespace.",
    ),
    ErrorReason.STREAM_FAIR_SHARE: (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "The dispatcher's worker streams are nearly all taken and the namespace already holds its fair "
        "share of them; the stream was not opened. RetryInfo says when to retry (or connect to another "
        "dispatcher); ErrorInfo metadata names the share (limit), the namespace and its open streams.",
    ),
    ErrorReason.METHOD_NOT_IMPLEMENTED: (
        grpc.StatusCode.UNIMPLEMENTED,
        "The service does not implement this method (e.g. a HintService method of another service).",
    ),
    ErrorReason.INTERNAL: (
        grpc.StatusCode.INTERNAL,
        "An unexpected server fault; details are in the server log.",
    ),
}


@dataclass(frozen=True)
class FieldViolation:
    """One bad field: ``field`` is the request field path (e.g. ``schedule_time``), ``description`` why."""

    field: str
    description: str


class GnomonError(Exception):
    """Base of all domain errors. ``reason`` must be a key of :data:`REASONS`."""

    reason: str = ErrorReason.INTERNAL

    def __init__(
        self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        if self.reason not in REASONS:
            raise ValueError(f"undocumented error reason {self.reason}")
        self.message = message
        self.metadata = metadata or {}

    @property
    def code(self) -> grpc.StatusCode:
        """The gRPC status code for this error's reason."""
        return REASONS[ErrorReason(self.reason)][0]


class InvalidArgument(GnomonError):
    """Bad request fields (INVALID_ARGUMENT + BadRequest). Raised before anything is written."""

    reason: str = ErrorReason.INVALID_FIELD

    def __init__(
        self, violations: list[FieldViolation], message: str | None = None, *, reason: str | None = None
    ):
        self.violations = violations
        super().__init__(
            message or "; ".join(f"{v.field}: {v.description}" for v in violations), reason=reason
        )


class NotFound(GnomonError):
    """The named resource does not exist (NOT_FOUND)."""

    reason: str = ErrorReason.JOB_NOT_FOUND


class AlreadyExists(GnomonError):
    """A conflicting resource or request exists (ALREADY_EXISTS)."""

    reason: str = ErrorReason.REQUEST_ID_REUSED


class FailedPrecondition(GnomonError):
    """Wrong state or stale version/token (FAILED_PRECONDITION); reason says which."""

    reason: str = ErrorReason.STALE_ATTEMPT


class StaleFencingToken(FailedPrecondition):
    """A write made under shard ownership carried a token older than the recorded one."""

    reason: str = ErrorReason.STALE_FENCING_TOKEN


class Aborted(GnomonError):
    """A compare-and-set lost to concurrent changes (ABORTED); nothing was written, the caller may retry."""

    reason: str = ErrorReason.CONCURRENT_MODIFICATION


class PermissionDenied(GnomonError):
    """The caller may not do this in that namespace (PERMISSION_DENIED), whether or not the resource
    exists (https://google.aip.dev/211). Nothing was read or written."""

    reason: str = ErrorReason.NAMESPACE_NOT_ALLOWED


class Unauthenticated(GnomonError):
    """No valid credential came with the call (UNAUTHENTICATED). Nothing was read or written."""

    reason: str = ErrorReason.UNAUTHENTICATED


class QuotaExceeded(GnomonError):
    """A namespace quota would be exceeded (RESOURCE_EXHAUSTED, reason QUOTA_EXCEEDED); nothing was
    written. ``retry_after_s`` (seconds, >= 0) becomes the status's ``google.rpc.RetryInfo``; the
    metadata names the ``quota``, its ``limit`` and the ``namespace``, plus ``extra`` entries.
    ``reason`` overrides QUOTA_EXCEEDED with another RESOURCE_EXHAUSTED reason (e.g.
    STREAM_FAIR_SHARE)."""

    reason: str = ErrorReason.QUOTA_EXCEEDED

    def __init__(
        self,
        message: str,
        *,
        quota: str,
        limit: float,
        namespace: str,
        retry_after_s: float,
        extra: dict[str, str] | None = None,
        reason: str | None = None,
    ):
        self.retry_after_s = max(0.0, retry_after_s)
        metadata = {"quota": quota, "limit": f"{limit:g}", "namespace": namespace, **(extra or {})}
        super().__init__(message, reason=reason, metadata=metadata)


class Unavailable(GnomonError):
    """A dependency is down (UNAVAILABLE); the caller may retry. Nothing was written."""

    reason: str = ErrorReason.DATABASE_UNAVAILABLE


class AuditUnavailable(Unavailable):
    """An audited call refused before it ran because the audit buffer is full (UNAVAILABLE, reason
    ``AUDIT_UNAVAILABLE``): it could not be audited, so it is not served. Nothing was written."""

    reason: str = ErrorReason.AUDIT_UNAVAILABLE


class Validator:
    """Collects field violations; :meth:`raise_if_any` raises one :class:`InvalidArgument` for all."""

    def __init__(self) -> None:
        self.violations: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        """Records that ``field`` is invalid because ``description``."""
        self.violations.append(FieldViolation(field, description))

    def check(self, ok: bool, field: str, description: str) -> bool:
        """Records a violation when ``ok`` is false; returns ``ok``."""
        if not ok:
            self.add(field, description)
        return ok

    def raise_if_any(self, reason: str | None = None) -> None:
        """Raises :class:`InvalidArgument` listing every recorded violation, if any; ``reason``
        (an INVALID_ARGUMENT reason of :data:`REASONS`) overrides INVALID_FIELD."""
        if self.violations:
            raise InvalidArgument(self.violations, reason=reason)
