"""The per-job retry policy of :meth:`gnomon.sdk.Client.create_job` (mirror of ``gnomon.v1.RetryPolicy``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import retry_pb2

from . import convert

__all__ = ["RetryPolicy", "retry_policy_to_proto"]

Span = timedelta | float | int


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the failed attempts of a job are retried; ``None`` fields take the server's defaults.

    Attributes:
        initial_backoff: backoff before the first retry (``timedelta`` or seconds; default 1 s).
        max_backoff: cap of any backoff (default 300 s, at most 1 day).
        multiplier: growth per retry, 1-10 (default 2).
        jitter: randomized fraction of each delay, 0-1 (default 1: full jitter; 0: none).
        max_age: no retry starts later than this after the first attempt was dispatched
            (default: no limit); the job goes to the DLQ instead.
        non_retryable_errors: error type names (e.g. ``"ValueError"``) never retried: a failure
            whose error text is ``"<name>"`` or starts with ``"<name>:"`` (the SDK reports
            ``"ExcType: message"``) goes to the DLQ at once.

    The server checks the values (INVALID_ARGUMENT with violations ``retry_policy.<field>``).
    """

    initial_backoff: Span | None = None
    max_backoff: Span | None = None
    multiplier: float | None = None
    jitter: float | None = None
    max_age: Span | None = None
    non_retryable_errors: tuple[str, ...] | list[str] = field(default_factory=tuple)

    @classmethod
    def from_proto(cls, msg: retry_pb2.RetryPolicy) -> RetryPolicy:
        """Builds a :class:`RetryPolicy` from a ``gnomon.v1.RetryPolicy`` (spans as ``timedelta``)."""
        return cls(
            initial_backoff=convert.field_duration(msg, "initial_backoff"),
            max_backoff=convert.field_duration(msg, "max_backoff"),
            multiplier=msg.multiplier or None,
            jitter=msg.jitter if msg.HasField("jitter") else None,
            max_age=convert.field_duration(msg, "max_age"),
            non_retryable_errors=tuple(msg.non_retryable_errors),
        )

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (spans protobuf-JSON style, e.g. ``"1.5s"``; unset -> ``None``)."""

        def span(v):
            return (
                None
                if v is None
                else convert.duration_text(v if isinstance(v, timedelta) else timedelta(seconds=float(v)))
            )

        return {
            "initial_backoff": span(self.initial_backoff),
            "max_backoff": span(self.max_backoff),
            "multiplier": self.multiplier,
            "jitter": self.jitter,
            "max_age": span(self.max_age),
            "non_retryable_errors": list(self.non_retryable_errors),
        }


_KEYS = {"initial_backoff", "max_backoff", "multiplier", "jitter", "max_age", "non_retryable_errors"}


def retry_policy_to_proto(policy: RetryPolicy | Mapping[str, Any]) -> retry_pb2.RetryPolicy:
    """A :class:`RetryPolicy` or a dict with the same keys -> ``gnomon.v1.RetryPolicy``.

    Raises:
        TypeError: neither a RetryPolicy nor a mapping, or a span of the wrong type.
        ValueError: an unknown key.
    """
    if isinstance(policy, Mapping):
        unknown = set(policy) - _KEYS
        if unknown:
            raise ValueError(f"unknown retry policy keys: {sorted(unknown)}")
        policy = RetryPolicy(**policy)
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"retry_policy must be a RetryPolicy or a dict, not {type(policy).__name__}")
    m = retry_pb2.RetryPolicy()
    for name in ("initial_backoff", "max_backoff", "max_age"):
        v = getattr(policy, name)
        if v is not None:
            getattr(m, name).CopyFrom(convert.to_duration(v))
    if policy.multiplier is not None:
        m.multiplier = float(policy.multiplier)
    if policy.jitter is not None:
        m.jitter = float(policy.jitter)
    if isinstance(policy.non_retryable_errors, str):
        raise TypeError("non_retryable_errors must be a list of names, not a string")
    m.non_retryable_errors.extend(policy.non_retryable_errors)
    return m
