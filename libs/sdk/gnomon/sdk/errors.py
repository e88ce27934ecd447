"""Exceptions of the SDK: RPC errors decoded from the rich status, and handler-raised failures.

Two families live here:

* :class:`GnomonError` -- raised by :class:`gnomon.sdk.Client` (and the worker, for fatal stream
  errors) when an RPC fails. It carries the gRPC code, the message, and what the server put in the
  ``google.rpc.Status`` details: the ``ErrorInfo.reason`` (UPPER_SNAKE, e.g. ``NOT_FOUND``,
  ``INVALID_QUEUE``) and the ``BadRequest`` field violations.
* Exceptions a job handler raises to choose the failure class of its attempt:
  :class:`PermanentError`, :class:`ThrottledError`, :class:`AmbiguousError`,
  :class:`TransientError` (anything else is TRANSIENT too), plus :class:`Cancelled`, raised by ``JobContext.raise_if_cancelled()``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "GnomonError",
    "Cancelled",
    "PermanentError",
    "ThrottledError",
    "AmbiguousError",
    "TransientError",
    "decode_rich_status",
]

_DETAILS_KEY = "grpc-status-details-bin"


class GnomonError(Exception):
    """A failed Gnomon RPC, decoded from the server's ``google.rpc.Status``.

    Attributes:
        code: the ``grpc.StatusCode`` (e.g. ``grpc.StatusCode.INVALID_ARGUMENT``).
        message: the human-readable status message (``details`` of the call).
        reason: ``ErrorInfo.reason`` (UPPER_SNAKE) when the server sent one, else ``None``.
        domain: ``ErrorInfo.domain`` (``"gnomon.dev"``) when sent, else ``None``.
        metadata: ``ErrorInfo.metadata`` as a plain dict (empty when absent).
        field_violations: ``BadRequest.field_violations`` as ``[(field, description), ...]``;
            empty unless the server rejected input (``INVALID_ARGUMENT``).
        retry_delay: ``RetryInfo.retry_delay`` as a ``timedelta`` when the server sent one (e.g.
            ``RESOURCE_EXHAUSTED``/``QUOTA_EXCEEDED``: wait this long before retrying), else ``None``.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str | None = None,
        field_violations: list[tuple[str, str]] | None = None,
        *,
        domain: str | None = None,
        metadata: dict[str, str] | None = None,
        retry_delay: timedelta | None = None,
    ) -> None:
        self.code = code
        self.retry_delay = retry_delay
        self.message = message
        self.reason = reason
        self.field_violations = list(field_violations or [])
        self.domain = domain
        self.metadata = dict(metadata or {})
        super().__init__(str(self))

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        text = f"{name}: {self.message}"
        if self.reason:
            text += f" [{self.reason}]"
        if self.field_violations:
            text += " (" + "; ".join(f"{f}: {d}" for f, d in self.field_violations) + ")"
        return text

    def __repr__(self) -> str:
        return (
            f"GnomonError(code={self.code!r}, message={self.message!r}, reason={self.reason!r}, "
            f"field_violations={self.field_violations!r})"
        )

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> GnomonError:
        """Builds a :class:`GnomonError` from a failed call (sync ``grpc.RpcError`` or
        ``grpc.aio.AioRpcError``).

        Uses ``grpc_status.rpc_status.from_call`` to read the rich status from the trailing
        metadata; when the status proto is absent, malformed or inconsistent with the call's
        code, falls back to the plain code and details. Never raises.
        """
        code = _call_attr(err, "code") or grpc.StatusCode.UNKNOWN
        message = _call_attr(err, "details") or ""
        status = None
        try:
            status = rpc_status.from_call(err)
        except ValueError:
            # Code/message mismatch between the call and the proto: trust the call for code and
            # message, but still read the details (reason, violations) from the proto.
            status = _status_from_metadata(_call_attr(err, "trailing_metadata"))
        except Exception:  # malformed bytes, or not a call object at all
            status = None
        if status is None:
            return cls(code, message)
        reason, domain, metadata, violations = decode_rich_status(status)
        return cls(
            code,
            message or status.message,
            reason,
            violations,
            domain=domain,
            metadata=metadata,
            retry_delay=retry_delay_of(status),
        )


def decode_rich_status(
    status: status_pb2.Status,
) -> tuple[str | None, str | None, dict[str, str], list[tuple[str, str]]]:
    """Extracts ``(reason, domain, metadata, field_violations)`` from a ``google.rpc.Status``.

    Reads the first ``ErrorInfo`` and every ``BadRequest`` in ``status.details``; other detail
    types are ignored. ``reason``/``domain`` are ``None`` when no ``ErrorInfo`` is present (or
    its fields are empty).
    """
    reason = domain = None
    metadata: dict[str, str] = {}
    violations: list[tuple[str, str]] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and reason is None:
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason or None
            domain = info.domain or None
            metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return reason, domain, metadata, violations


def retry_delay_of(status: status_pb2.Status) -> timedelta | None:
    """The ``retry_delay`` of the first ``google.rpc.RetryInfo`` in ``status.details``, or ``None``."""
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            d = info.retry_delay
            return timedelta(seconds=d.seconds, microseconds=d.nanos // 1000)
    return None


def _call_attr(err: object, name: str) -> Any:
    fn = getattr(err, name, None)
    if fn is None:
        return None
    try:
        return fn()
    except Exception:
        return None


def _status_from_metadata(trailing: Any) -> status_pb2.Status | None:
    for key, value in trailing or ():
        if key == _DETAILS_KEY:
            return status_pb2.Status.FromString(value)
    return None


class Cancelled(Exception):
    """Raised by ``JobContext.raise_if_cancelled()`` when the attempt should stop.

    ``reason`` says why (see ``JobContext.cancel_reason``): ``"cancel_requested"`` (a caller
    cancelled the job), ``"refused"`` (the dispatcher refused the accept or a heartbeat: the
    attempt is stale), ``"lease_lost"`` (the lease could not be renewed in time) or
    ``"shutdown"`` (the worker's drain timeout ran out). When a handler lets it escape, the worker
    reports ``PERMANENT`` for ``cancel_requested``, ``TRANSIENT`` for ``shutdown``, and nothing at
    all for ``refused``/``lease_lost`` (the attempt is no longer this worker's).
    """

    def __init__(self, reason: str | None = None, message: str | None = None) -> None:
        self.reason = reason
        super().__init__(message or (f"attempt cancelled ({reason})" if reason else "attempt cancelled"))


class PermanentError(Exception):
    """Raise from a handler to fail the attempt with failure class PERMANENT: never retried,
    the job goes to the dead-letter queue."""


class ThrottledError(Exception):
    """Raise from a handler to fail the attempt with failure class THROTTLED.

    Args:
        retry_after: seconds (float, >= 0) the scheduler should wait before the next attempt;
            sent as the result's ``retry_after`` Duration.
        message: optional text for the result's ``error``.
    """

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        if retry_after is None or retry_after < 0:
            raise ValueError("retry_after must be a non-negative number of seconds")
        self.retry_after = float(retry_after)
        super().__init__(message or f"throttled; retry after {self.retry_after:g}s")


class TransientError(Exception):
    """Raise from a handler to fail the attempt with failure class TRANSIENT: retried after the
    job's backoff (within its retry policy, the queue's retry budget and circuit breaker). Any
    exception no mapping classifies is TRANSIENT too; this one says so explicitly."""


class AmbiguousError(Exception):
    """Raise from a handler when the effect may or may not have happened (e.g. a timeout after
    sending a request): failure class AMBIGUOUS, retried only if the job is idempotent."""
