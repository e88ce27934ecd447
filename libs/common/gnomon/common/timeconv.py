"""Conversions between protobuf well-known types and Python time values (UTC-aware datetimes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import overload

from google.protobuf import duration_pb2, timestamp_pb2


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
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(dt.astimezone(UTC))
    return ts


def to_duration(td: timedelta) -> duration_pb2.Duration:
    """timedelta -> Duration."""
    d = duration_pb2.Duration()
    d.FromTimedelta(td)
    return d


def from_timestamp(ts: timestamp_pb2.Timestamp) -> datetime:
    """Timestamp -> UTC-aware datetime."""
    return ts.ToDatetime(tzinfo=UTC)
