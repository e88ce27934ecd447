"""gnomon.common.timeconv.to_timestamp: the integer-arithmetic conversion equals protobuf's own
Timestamp.FromDatetime for every representable instant, aware (any offset) or naive (= UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from gnomon.common.timeconv import set_timestamp, to_timestamp


def reference(dt: datetime) -> tuple[int, int]:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime((dt if dt.tzinfo else dt.replace(tzinfo=UTC)).astimezone(UTC))
    return ts.seconds, ts.nanos


offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))


@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.one_of(st.none(), offsets),
)
def test_to_timestamp_equals_protobufs_conversion(naive: datetime, tz) -> None:
    dt = naive if tz is None else naive.replace(tzinfo=tz)
    got = to_timestamp(dt)
    assert (got.seconds, got.nanos) == reference(dt)


def test_to_timestamp_edges() -> None:
    assert to_timestamp(None) is None
    t = to_timestamp(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))
    assert (t.seconds, t.nanos) == (-1, 999_999_000)  # nanos are never negative
    t = to_timestamp(datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=2))))
    assert (t.seconds, t.nanos) == (1774740600, 0)


@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.one_of(st.none(), offsets),
)
def test_set_timestamp_in_place_equals_to_timestamp(naive: datetime, tz) -> None:
    dt = naive if tz is None else naive.replace(tzinfo=tz)
    field = timestamp_pb2.Timestamp(seconds=123, nanos=456)  # overwritten, not merged
    set_timestamp(field, dt)
    assert (field.seconds, field.nanos) == reference(dt)
