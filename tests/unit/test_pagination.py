"""The one page-token codec (gnomon.common.pagination): round trips, and every token it did not make
for the same List RPC and filters is INVALID_ARGUMENT on ``page_token``."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime

import pytest

from gnomon.common import pagination as pg
from gnomon.common.errors import InvalidArgument, Validator

AT = datetime(2026, 12, 1, 10, 30, 0, 123456, tzinfo=UTC)
ID = uuid.UUID("0b7a1c52-3a57-4a2e-9a51-0d1d0f8d6c1e")


def refused(fn, *args) -> str:
    with pytest.raises(InvalidArgument) as e:
        fn(*args)
    assert [v.field for v in e.value.violations] == ["page_token"]
    assert e.value.code.name == "INVALID_ARGUMENT"
    return e.value.violations[0].description


def test_round_trips():
    f = pg.fingerprint("default", None, "q")
    assert pg.decode(pg.encode("ListThings", f, {"a": "x", "n": 7}), "ListThings", f) == {"a": "x", "n": 7}
    assert pg.decode_keyset(pg.encode_keyset("ListJobs", f, AT, ID), "ListJobs", f) == (AT, ID)
    token = pg.encode("ListOccurrences", f, {"b": AT.isoformat(), "a": 3, "s": "sched-1"})
    cursor = pg.decode(token, "ListOccurrences", f)
    assert pg.instant_of(cursor, "b", "ListOccurrences") == AT
    assert pg.int_of(cursor, "a", "ListOccurrences") == 3
    assert pg.text_of(cursor, "s", "ListOccurrences") == "sched-1"
    assert token.isascii() and "=" not in token and "/" not in token and "+" not in token


def test_fingerprint_tells_filters_apart():
    assert pg.fingerprint("default", None, "") != pg.fingerprint("default", "None", "")
    assert pg.fingerprint("a", "b") != pg.fingerprint("a|b")
    assert len(pg.fingerprint("x")) == 16


def test_foreign_tokens_are_refused():
    f, g = pg.fingerprint("default", None), pg.fingerprint("default", "q")
    token = pg.encode_keyset("ListJobs", f, AT, ID)
    assert "other filters" in refused(pg.decode, token, "ListJobs", g)
    assert "ListDeadLetters" in refused(pg.decode, token, "ListDeadLetters", f)


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "",
        ".",
        "a.b.c",
        "!!!.???",
        "x" * 5000,
        "eyJ9.AAAA",
        base64.urlsafe_b64encode(b"{}").decode(),
    ],
)
def test_garbage_is_refused(token):
    refused(pg.decode, token, "ListJobs", pg.fingerprint())


def test_forged_tokens_are_refused():
    f = pg.fingerprint("default", None)
    body, mac = pg.encode_keyset("ListJobs", f, AT, ID).split(".")
    data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    data["c"]["t"] = "1970-01-01T00:00:00+00:00"  # hand-edited cursor, old MAC
    edited = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    refused(pg.decode, edited.decode().rstrip("=") + "." + mac, "ListJobs", f)
    # the pre-codec shape (unsigned base64 JSON) is not a token either
    plain = base64.urlsafe_b64encode(json.dumps({"t": AT.isoformat(), "id": str(ID), "f": f}).encode())
    refused(pg.decode, plain.decode().rstrip("="), "ListJobs", f)


def test_cursor_shapes_are_checked():
    f = pg.fingerprint()
    for cursor in (
        {"t": "notadate", "id": str(ID)},
        {"t": "2026-01-01", "id": str(ID)},
        {"t": AT.isoformat()},
    ):
        refused(pg.decode_keyset, pg.encode("ListJobs", f, cursor), "ListJobs", f)
    c = pg.decode(pg.encode("M", f, {"a": -1, "s": "a\u0000", "n": "5"}), "M", f)
    refused(pg.int_of, c, "a", "M")
    refused(pg.int_of, c, "n", "M")
    refused(pg.text_of, c, "s", "M")
    refused(pg.instant_of, c, "missing", "M")


def test_decode_into_collects_the_violation():
    v = Validator()
    assert pg.decode_into(v, "", "M", "f") is None and not v.violations
    assert pg.decode_into(v, "garbage", "M", "f") is None
    assert [x.field for x in v.violations] == ["page_token"]


def test_page_size_and_split():
    v = Validator()
    assert pg.page_size(v, 0, maximum=1000, default=100) == 100
    assert pg.page_size(v, 7, maximum=1000, default=100) == 7
    assert not v.violations
    assert pg.page_size(v, 1001, maximum=1000, default=100) == 100
    assert pg.page_size(v, -1, maximum=1000, default=100) == 100
    assert [x.field for x in v.violations] == ["page_size", "page_size"]
    assert pg.split_page([1, 2, 3], 2) == ([1, 2], 2)
    assert pg.split_page([1, 2], 2) == ([1, 2], None)
    assert pg.split_page([], 2) == ([], None)


def test_budgeted_page_stops_at_the_byte_budget_and_continues_after_the_last_item() -> None:
    from google.protobuf import wrappers_pb2

    from gnomon.common.pagination import REPLY_RESERVE_BYTES, budgeted_page, decode

    rows = list(range(10))
    convert = lambda i: wrappers_pb2.BytesValue(value=b"x" * 1000)  # noqa: E731
    budget = REPLY_RESERVE_BYTES + 2500  # each item is 1003 bytes + framing: 2 fit, 3 do not
    items, token = budgeted_page(rows, 5, "ListX", "f", lambda i: {"a": i}, convert, budget_bytes=budget)
    assert len(items) == 2 and decode(token, "ListX", "f") == {"a": 1}  # 3 would pass the budget
    items, token = budgeted_page(rows, 5, "ListX", "f", lambda i: {"a": i}, convert, budget_bytes=10**9)
    assert len(items) == 5 and decode(token, "ListX", "f") == {"a": 4}
    items, token = budgeted_page(rows[:3], 5, "ListX", "f", lambda i: {"a": i}, convert, budget_bytes=10**9)
    assert len(items) == 3 and token == ""
    items, token = budgeted_page(rows, 5, "ListX", "f", lambda i: {"a": i}, convert, budget_bytes=1)
    assert len(items) == 1 and decode(token, "ListX", "f") == {"a": 0}  # one item always goes out
