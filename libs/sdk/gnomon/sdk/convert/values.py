"""Conversions between protobuf well-known types / job states and plain Python values.

Conventions (used across the SDK):

* Instants are ``datetime`` objects that are **UTC-aware** (``tzinfo=timezone.utc``). Naive
  datetimes are refused (``ValueError``): Gnomon is explicit about time, and guessing the zone of
  a naive value is a classic source of off-by-hours bugs. Aware datetimes in any zone are
  accepted and converted to the same instant in UTC.
* Spans are ``timedelta`` objects, or ``int``/``float`` **seconds** where an argument allows it.
* An unset proto message field (``HasField`` false) maps to ``None``.
* Job states are short upper-case strings: ``"SCHEDULED"``, ``"SUCCEEDED"``, ... (the
  ``JOB_STATE_`` prefix dropped).
"""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from gnomon._proto.gnomon.v1 import job_pb2

__all__ = [
    "to_timestamp",
    "from_timestamp",
    "to_duration",
    "from_duration",
    "duration_seconds",
    "encode_payload",
    "decode_json_payload",
    "state_name",
    "state_value",
    "rfc3339",
    "duration_text",
    "job_name",
    "namespace_parent",
    "field_time",
    "field_duration",
    "b64",
]

_STATE_PREFIX = "JOB_STATE_"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: A ``Timestamp``'s range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799


def to_timestamp(dt: datetime) -> timestamp_pb2.Timestamp:
    """Converts an aware ``datetime`` to a ``google.protobuf.Timestamp`` (same instant, UTC).

    Raises:
        TypeError: ``dt`` is not a ``datetime``.
        ValueError: ``dt`` is naive (no ``tzinfo``).
    """
    if not isinstance(dt, datetime):
        raise TypeError(f"expected a datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError("naive datetime: pass a timezone-aware datetime (e.g. tzinfo=timezone.utc)")
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(dt.astimezone(UTC))
    return ts


def from_timestamp(ts: timestamp_pb2.Timestamp | None) -> datetime | None:
    """Converts a ``Timestamp`` to a UTC-aware ``datetime`` (microsecond precision: the last three
    nanosecond digits are truncated). ``None`` maps to ``None``; callers pass ``None`` for an unset
    field (see :func:`field_time`)."""
    if ts is None:
        return None
    # what ``ts.ToDatetime(tzinfo=UTC)`` returns, without its arithmetic in Python (1.65 -> 1.0 us;
    # every assignment converts several); the same ValueError for a timestamp out of its range
    if not 0 <= ts.nanos < 1_000_000_000 or not _MIN_SECONDS <= ts.seconds <= _MAX_SECONDS:
        raise ValueError(f"Timestamp out of range: seconds={ts.seconds} nanos={ts.nanos}")
    return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def field_time(msg: Message, field: str) -> datetime | None:
    """``from_timestamp(msg.<field>)`` if the message field is set, else ``None``."""
    return from_timestamp(getattr(msg, field)) if msg.HasField(field) else None


def field_duration(msg: Message, field: str) -> timedelta | None:
    """``from_duration(msg.<field>)`` if the message field is set, else ``None``."""
    return from_duration(getattr(msg, field)) if msg.HasField(field) else None


def to_duration(span: timedelta | float | int) -> duration_pb2.Duration:
    """Converts a ``timedelta`` or a number of **seconds** (int/float) to a ``Duration``.

    Float seconds keep nanosecond precision (rounded to the nearest nanosecond). Negative spans
    are converted as is (the server validates ranges).

    Raises:
        TypeError: not a timedelta or a real number (``bool`` is refused).
        ValueError: a non-finite float (``nan``/``inf``).
    """
    d = duration_pb2.Duration()
    if isinstance(span, timedelta):
        d.FromTimedelta(span)
        return d
    if isinstance(span, bool) or not isinstance(span, (int, float)):
        raise TypeError(f"expected a timedelta or seconds (int/float), got {type(span).__name__}")
    if isinstance(span, float) and not math.isfinite(span):
        raise ValueError(f"duration must be finite, got {span}")
    if isinstance(span, int):
        d.seconds = span
        return d
    d.FromNanoseconds(round(span * 1_000_000_000))
    return d


def from_duration(d: duration_pb2.Duration | None) -> timedelta | None:
    """Converts a ``Duration`` to a ``timedelta`` (microsecond precision); ``None`` -> ``None``."""
    if d is None:
        return None
    # what ``d.ToTimedelta()`` returns (nanoseconds truncated toward zero, as it does), cheaper
    n = d.nanos
    return timedelta(seconds=d.seconds, microseconds=n // 1000 if n >= 0 else -(-n // 1000))


def duration_seconds(d: duration_pb2.Duration) -> float:
    """A ``Duration`` as float seconds (nanosecond precision)."""
    return d.seconds + d.nanos / 1e9


def encode_payload(
    payload: bytes | bytearray | memoryview | str | dict[str, Any] | list[Any] | None,
) -> bytes:
    """Encodes a job payload to bytes.

    * ``bytes``-like: unchanged; ``str``: UTF-8; ``dict``/``list``: compact JSON, UTF-8
      (``ensure_ascii=False``, separators ``(",", ":")``); ``None``: empty.

    Raises:
        TypeError: any other type, or a dict/list that is not JSON-serialisable.
    """
    if payload is None:
        return b""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, (bytearray, memoryview)):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8")
    if isinstance(payload, (dict, list)):
        try:
            return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise TypeError(f"payload is not JSON-serialisable: {exc}") from exc
    raise TypeError(f"payload must be bytes, str, dict or list, got {type(payload).__name__}")


_NOT_JSON = object()


def decode_json_payload(payload: bytes, default: Any = _NOT_JSON) -> Any:
    """Decodes a UTF-8 JSON payload.

    Returns ``default`` when the payload is not UTF-8 JSON and a default was given.

    Raises:
        ValueError: not UTF-8 JSON and no ``default`` (``json.JSONDecodeError`` and
            ``UnicodeDecodeError`` are both ``ValueError``).
    """
    try:
        return json.loads(payload.decode("utf-8"))
    except ValueError:
        if default is _NOT_JSON:
            raise
        return default


def state_name(value: int) -> str:
    """``JobState`` number -> short name (``1`` -> ``"SCHEDULED"``; ``0`` -> ``"UNSPECIFIED"``;
    a number unknown to this SDK version -> ``"UNKNOWN_<n>"``)."""
    try:
        name = job_pb2.JobState.Name(value)
    except ValueError:
        return f"UNKNOWN_{value}"
    return name[len(_STATE_PREFIX) :] if name.startswith(_STATE_PREFIX) else name


def state_value(state: str | int | None) -> int:
    """Short or full state name (case-insensitive), or the number, -> ``JobState`` number.
    ``None``/``""`` -> ``0`` (unspecified: any state).

    Raises:
        ValueError: unknown state name or number.
    """
    if state is None or state == "":
        return 0
    if isinstance(state, bool):
        raise ValueError(f"unknown job state {state!r}")
    if isinstance(state, int):
        if state not in job_pb2.JobState.values():
            raise ValueError(f"unknown job state {state!r}")
        return state
    name = str(state).strip().upper()
    if not name.startswith(_STATE_PREFIX):
        name = _STATE_PREFIX + name
    try:
        return job_pb2.JobState.Value(name)
    except ValueError:
        valid = ", ".join(state_name(v) for v in job_pb2.JobState.values() if v)
        raise ValueError(f"unknown job state {state!r}; expected one of {valid}") from None


def rfc3339(dt: datetime | None) -> str | None:
    """A UTC RFC 3339 string with a ``Z`` suffix (``2026-03-08T07:30:00.250000Z``; fraction only
    when non-zero), or ``None``."""
    if dt is None:
        return None
    u = dt.astimezone(UTC).replace(tzinfo=None)
    return u.isoformat(timespec="microseconds" if u.microsecond else "seconds") + "Z"


def duration_text(td: timedelta | None) -> str | None:
    """A span in the protobuf JSON form: seconds with an ``s`` suffix (``"30s"``, ``"1.5s"``);
    ``None`` -> ``None``."""
    if td is None:
        return None
    secs = td.total_seconds()
    return f"{secs:.6f}".rstrip("0").rstrip(".") + "s"


def namespace_parent(namespace: str) -> str:
    """``"default"`` -> ``"namespaces/default"`` (a value already starting with ``namespaces/``
    is returned unchanged)."""
    if namespace.startswith("namespaces/"):
        return namespace
    return f"namespaces/{namespace}"


def job_name(name_or_id: str, namespace: str) -> str:
    """Full job resource name from a full name or a bare id.

    ``"namespaces/x/jobs/abc"`` -> unchanged; ``"abc"`` -> ``"namespaces/<namespace>/jobs/abc"``.

    Raises:
        ValueError: empty, or contains ``/`` without being a full ``namespaces/*/jobs/*`` name.
    """
    if not name_or_id:
        raise ValueError("job name or id is empty")
    if "/" not in name_or_id:
        return f"{namespace_parent(namespace)}/jobs/{name_or_id}"
    parts = name_or_id.split("/")
    if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "jobs" and parts[1] and parts[3]:
        return name_or_id
    raise ValueError(f"not a job name ('namespaces/{{ns}}/jobs/{{id}}') or bare id: {name_or_id!r}")


def b64(data: bytes) -> str:
    """Standard base64 (with padding) of ``data`` as ``str``."""
    return base64.b64encode(data).decode("ascii")
