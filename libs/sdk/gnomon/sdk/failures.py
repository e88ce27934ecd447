"""Mapping a handler's exception to the failure class reported for its attempt."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb

from .errors import AmbiguousError, Cancelled, PermanentError, ThrottledError, TransientError

__all__ = ["FailureClass", "Failure", "classify_exception", "format_error", "DEFAULT_EXCEPTION_CLASSES"]

MAX_ERROR_CHARS = 4096


class FailureClass(enum.IntEnum):
    """Failure class of an attempt (values equal ``gnomon.v1.FailureClass``): what a handler's
    failure reports, and what :attr:`Job.failure_class`, :attr:`JobAttempt.failure_class` and
    :attr:`DeadLetterAttempt.failure_class` read back (``None`` there when nothing failed).

    TRANSIENT: retried with capped exponential backoff. THROTTLED: retried after ``retry_after``.
    PERMANENT: never retried (to the DLQ). AMBIGUOUS: retried only if the job is idempotent; the
    scheduler also records it for a lost lease and for an exceeded start-to-close bound.
    """

    TRANSIENT = fpb.FAILURE_CLASS_TRANSIENT
    THROTTLED = fpb.FAILURE_CLASS_THROTTLED
    PERMANENT = fpb.FAILURE_CLASS_PERMANENT
    AMBIGUOUS = fpb.FAILURE_CLASS_AMBIGUOUS

    @classmethod
    def coerce(cls, value: FailureClass | str | int) -> FailureClass:
        """Accepts a member, a name (``"permanent"``, ``"FAILURE_CLASS_PERMANENT"``) or the number.

        Raises:
            ValueError: anything else.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().upper().removeprefix("FAILURE_CLASS_")
            try:
                return cls[key]
            except KeyError:
                raise ValueError(f"unknown failure class {value!r}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        raise ValueError(f"unknown failure class {value!r}")

    @classmethod
    def from_wire(cls, value: int) -> FailureClass | None:
        """A ``gnomon.v1.FailureClass`` number read from the server -> the member, or ``None`` for
        ``FAILURE_CLASS_UNSPECIFIED`` (nothing failed) and for a number this SDK does not know."""
        try:
            return cls(value)
        except ValueError:
            return None


DEFAULT_EXCEPTION_CLASSES: dict[type[BaseException], FailureClass] = {
    PermanentError: FailureClass.PERMANENT,
    ThrottledError: FailureClass.THROTTLED,
    AmbiguousError: FailureClass.AMBIGUOUS,
    TransientError: FailureClass.TRANSIENT,
}


@dataclass(frozen=True, slots=True)
class Failure:
    """How a failed attempt is reported.

    Attributes:
        failure_class: the class sent in ``AttemptResult.failure_class``.
        error: ``"ExcType: message"``, at most 4096 characters.
        retry_after: seconds for ``AttemptResult.retry_after`` (THROTTLED), else ``None``.
    """

    failure_class: FailureClass
    error: str
    retry_after: float | None = None


def format_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """``"ExcType: message"`` (just ``"ExcType"`` when the message is empty), truncated to
    ``limit`` characters (the last one being ``…`` when cut)."""
    msg = str(exc)
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def classify_exception(
    exc: BaseException,
    exception_classes: Mapping[type[BaseException], FailureClass | str] | None = None,
) -> Failure:
    """Chooses the failure class of an exception raised by a handler.

    Order: the user's ``exception_classes`` in insertion order (first ``isinstance`` match wins,
    so list subclasses before their bases), then :data:`DEFAULT_EXCEPTION_CLASSES`
    (PermanentError -> PERMANENT, ThrottledError -> THROTTLED, AmbiguousError -> AMBIGUOUS,
    TransientError -> TRANSIENT), then
    :class:`Cancelled` (PERMANENT when the job's cancellation was requested, else TRANSIENT),
    else TRANSIENT.

    ``retry_after`` is taken from the exception's ``retry_after`` attribute (seconds) when the
    class is THROTTLED and the attribute is a non-negative number.
    """
    cls: FailureClass | None = None
    for exc_type, value in (exception_classes or {}).items():
        if isinstance(exc, exc_type):
            cls = FailureClass.coerce(value)
            break
    if cls is None:
        for exc_type, value in DEFAULT_EXCEPTION_CLASSES.items():
            if isinstance(exc, exc_type):
                cls = value
                break
    if cls is None and isinstance(exc, Cancelled):
        cls = FailureClass.PERMANENT if exc.reason == "cancel_requested" else FailureClass.TRANSIENT
    if cls is None:
        cls = FailureClass.TRANSIENT
    retry_after = None
    if cls is FailureClass.THROTTLED:
        ra = getattr(exc, "retry_after", None)
        if isinstance(ra, (int, float)) and not isinstance(ra, bool) and ra >= 0:
            retry_after = float(ra)
    return Failure(cls, format_error(exc), retry_after)
