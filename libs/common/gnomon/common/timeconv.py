"""Conversions between protobuf well-known types and Python time values (UTC-aware datetimes).

Every Timestamp or Duration a client sends is converted once, here, by :func:`check_timestamp` and
:func:`check_duration`: the raw ``seconds``/``nanos`` are range-checked *before* any Python value is
built, so no client value can overflow ``datetime``/``timedelta`` (a Duration of 2**63-1 seconds, a
Timestamp in year 10000 or before year 1) -- it becomes a field violation (INVALID_ARGUMENT) naming
the field, never INTERNAL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import overload

from google.protobuf import duration_pb2, timestamp_pb2

from gnomon.common.errors import Validator

#: Earliest Timestamp accepted from a client: 1970-01-01T00:00:00Z, seconds since the epoch.
MIN_TIMESTAMP_SECONDS = 0
#: Latest Timestamp accepted from a client: 9999-12-31T23:59:59Z, seconds since the epoch.
MAX_TIMESTAMP_SECONDS = 253402300799
_NANOS = 1_000_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@overload
def to_timestamp(dt: datetime) -> timestamp_pb2.Timestamp: ...
@overload
def to_timestamp(dt: None) -> None: ...
@overload
def to_timestamp(dt: datetime | None) -> timestamp_pb2.Timestamp | None: ...
def to_timestamp(dt: datetime | None) -> timestamp_pb2.Timestamp | None:
    """A UTC-aware (or naive = UTC) datetime -> Timestamp; ``None`` -> ``None``."""
    if dt is None:
        return None
    seconds, nanos = _seconds_nanos(dt)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def _seconds_nanos(dt: datetime) -> tuple[int, int]:
    """``(seconds, nanos)`` since the epoch of a UTC-aware (or naive = UTC) ``dt``; nanos in [0, 1e9).
    Integer arithmetic: exact to the microsecond, and cheaper than ``Timestamp.FromDatetime`` (which
    goes through a time tuple) on the dispatcher's and the API's hot paths."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    seconds, micros = divmod((dt - _EPOCH) // _MICROSECOND, 1_000_000)
    return seconds, micros * 1000


def set_timestamp(field: timestamp_pb2.Timestamp, dt: datetime) -> None:
    """Sets the Timestamp ``field`` of a message in place to the UTC-aware (or naive = UTC) ``dt``,
    exactly as :func:`to_timestamp` would, without building and copying a second message (the API's
    hot path: several per job in every response)."""
    field.seconds, field.nanos = _seconds_nanos(dt)


def to_duration(td: timedelta) -> duration_pb2.Duration:
    """timedelta -> Duration."""
    d = duration_pb2.Duration()
    d.FromTimedelta(td)
    return d


def from_timestamp(ts: timestamp_pb2.Timestamp) -> datetime:
    """Timestamp -> UTC-aware datetime."""
    return ts.ToDatetime(tzinfo=UTC)


def check_timestamp(v: Validator, msg: timestamp_pb2.Timestamp, field: str) -> datetime | None:
    """A client Timestamp -> UTC-aware datetime (microsecond precision), or ``None`` after adding a
    violation on ``field`` to ``v``: seconds outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59Z
    (:data:`MIN_TIMESTAMP_SECONDS` .. :data:`MAX_TIMESTAMP_SECONDS`), or nanos outside [0, 999999999].
    Never raises."""
    if not (MIN_TIMESTAMP_SECONDS <= msg.seconds <= MAX_TIMESTAMP_SECONDS):
        v.add(field, "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z")
        return None
    if not (0 <= msg.nanos < _NANOS):
        v.add(field, "nanos must be in [0, 999999999]")
        return None
    return datetime.fromtimestamp(msg.seconds, tz=UTC) + timedelta(microseconds=msg.nanos // 1000)


def check_duration(
    v: Validator, msg: duration_pb2.Duration, field: str, lo: timedelta, hi: timedelta
) -> timedelta | None:
    """A client Duration -> timedelta in ``[lo, hi]`` (microsecond precision), or ``None`` after
    adding a violation on ``field`` to ``v``: negative, nanos outside [0, 999999999], or out of
    range (checked on the raw seconds first, so any int64 is safe). Never raises."""
    if msg.seconds < 0 or msg.nanos < 0:
        v.add(field, "must not be negative")
        return None
    if msg.nanos >= _NANOS:
        v.add(field, "nanos must be in [0, 999999999]")
        return None
    out_of_range = f"must be between {lo.total_seconds():g} s and {hi.total_seconds():g} s"
    if msg.seconds > hi.total_seconds():
        v.add(field, out_of_range)
        return None
    d = timedelta(seconds=msg.seconds, microseconds=msg.nanos // 1000)
    if not (lo <= d <= hi):
        v.add(field, out_of_range)
        return None
    return d


def duration_seconds(msg: duration_pb2.Duration) -> float:
    """A Duration as float seconds (``seconds + nanos / 1e9``), without building a ``timedelta``:
    any int64 seconds is safe (``Duration.ToTimedelta`` overflows past ~2.7e12 s). The caller
    bounds the value."""
    return float(msg.seconds) + msg.nanos / _NANOS
