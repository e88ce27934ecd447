"""The page-size rules and the page split of every List RPC (gnomon.common.pagination): 0 means the
default, a size out of range is INVALID_ARGUMENT on ``page_size``, and the next page's token is made
from the last row of a page only when more rows follow."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from gnomon.common import pagination as pg
from gnomon.common.errors import InvalidArgument, Validator


def violation(fn, *args, **kw) -> tuple[str, str]:
    with pytest.raises(InvalidArgument) as e:
        fn(*args, **kw)
    [v] = e.value.violations
    return v.field, v.description


def test_checked_page_size_defaults_and_bounds():
    assert (pg.DEFAULT_PAGE_SIZE, pg.MAX_PAGE_SIZE) == (100, 1000)
    assert pg.checked_page_size(0) == 100
    assert pg.checked_page_size(1) == 1
    assert pg.checked_page_size(1000) == 1000
    assert violation(pg.checked_page_size, 1001) == ("page_size", "must be between 0 and 1000")
    assert violation(pg.checked_page_size, -1) == ("page_size", "must be between 0 and 1000")


def test_page_size_records_the_violation_and_returns_the_default():
    v = Validator()
    assert pg.page_size(v, 5000) == 100
    assert [(x.field, x.description) for x in v.violations] == [("page_size", "must be between 0 and 1000")]
    assert pg.page_size(Validator(), 7) == 7


def test_clamped_page_size_caps_and_refuses_negative():
    assert pg.clamped_page_size(0, maximum=pg.ATTEMPTS_PAGE_SIZE) == 100
    assert pg.clamped_page_size(5000, maximum=100) == 100
    assert pg.clamped_page_size(3, maximum=100) == 3
    assert violation(pg.clamped_page_size, -1, maximum=100) == ("page_size", "must not be negative")


def test_next_page_token_only_when_more_rows_follow():
    f = pg.fingerprint("default")
    rows = [{"a": "s1"}, {"a": "s2"}, {"a": "s3"}]
    page, token = pg.next_page(rows, 2, "ListThings", f, lambda r: {"a": r["a"]})
    assert page == rows[:2]
    assert pg.decode(token, "ListThings", f) == {"a": "s2"}
    assert pg.next_page(rows, 3, "ListThings", f, lambda r: {"a": r["a"]}) == (rows, "")
    assert pg.next_page([], 3, "ListThings", f, lambda r: {"a": r["a"]}) == ([], "")


def test_keyset_cursor_round_trips():
    at, row_id = datetime(2026, 12, 1, 10, 30, tzinfo=UTC), uuid.uuid4()
    token = pg.encode("ListJobs", "f", pg.keyset(at, row_id))
    assert token == pg.encode_keyset("ListJobs", "f", at, row_id)
    assert pg.decode_keyset(token, "ListJobs", "f") == (at, row_id)
