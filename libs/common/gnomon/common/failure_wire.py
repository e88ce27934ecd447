"""The one mapping between the failure class the database records (text, ``attempts.failure_class``
and ``jobs.failure_class``: :class:`~gnomon.common.domain.failures.FailureClass` values or NULL) and
the contract's enum ``gnomon.v1.FailureClass`` (proto/gnomon/v1/failure_class.proto).

The database holds exactly the four class names (the scheduler itself writes only ``AMBIGUOUS``: a
lost lease, an exceeded start-to-close bound); each maps to the enum value of the same name, and
NULL (no failure) to ``FAILURE_CLASS_UNSPECIFIED``.
"""

from __future__ import annotations

from typing import cast

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb

from .domain.failures import FailureClass

__all__ = ["failure_class_to_wire", "failure_class_from_wire", "failure_class_filter"]

_TO_WIRE: dict[str, int] = {c.value: fpb.FailureClass.Value("FAILURE_CLASS_" + c.value) for c in FailureClass}
_FROM_WIRE: dict[int, FailureClass] = {v: FailureClass(k) for k, v in _TO_WIRE.items()}


def failure_class_to_wire(text: str | None) -> fpb.FailureClass:
    """A recorded class (``"PERMANENT"``, case-insensitive; ``None`` or ``""`` for no failure) ->
    its ``gnomon.v1.FailureClass`` number. Text that is no class (never written by this scheduler)
    maps to ``FAILURE_CLASS_UNSPECIFIED`` (0) rather than failing the read."""
    return cast("fpb.FailureClass", _TO_WIRE.get((text or "").upper(), fpb.FAILURE_CLASS_UNSPECIFIED))


def failure_class_from_wire(
    value: int, *, unspecified: FailureClass = FailureClass.TRANSIENT
) -> FailureClass:
    """A ``gnomon.v1.FailureClass`` number from a worker -> the class recorded. UNSPECIFIED and a
    number this version does not know are ``unspecified`` (default ``TRANSIENT``, the protocol's rule)."""
    return _FROM_WIRE.get(value, unspecified)


def failure_class_filter(value: int) -> str | None:
    """A dead-letter filter's ``gnomon.v1.FailureClass`` -> the recorded text it matches, or ``None``
    (UNSPECIFIED: any class). Raises ``ValueError`` for a number that is no class."""
    if value == fpb.FAILURE_CLASS_UNSPECIFIED:
        return None
    try:
        return _FROM_WIRE[value].value
    except KeyError:
        raise ValueError(f"unknown failure class {value}") from None
