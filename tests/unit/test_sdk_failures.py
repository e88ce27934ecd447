"""gnomon.sdk.failures: exception -> failure class mapping."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb
from gnomon.sdk import (
    AmbiguousError,
    Cancelled,
    FailureClass,
    PermanentError,
    ThrottledError,
    classify_exception,
)
from gnomon.sdk.failures import format_error


class RateLimited(Exception):
    def __init__(self, retry_after):
        super().__init__("429")
        self.retry_after = retry_after


class DbError(Exception):
    pass


class DeadlockError(DbError):
    pass


def test_enum_values_match_proto():
    assert FailureClass.TRANSIENT == fpb.FAILURE_CLASS_TRANSIENT
    assert FailureClass.THROTTLED == fpb.FAILURE_CLASS_THROTTLED
    assert FailureClass.PERMANENT == fpb.FAILURE_CLASS_PERMANENT
    assert FailureClass.AMBIGUOUS == fpb.FAILURE_CLASS_AMBIGUOUS


def test_defaults():
    f = classify_exception(PermanentError("bad input"))
    assert (f.failure_class, f.error, f.retry_after) == (
        FailureClass.PERMANENT,
        "PermanentError: bad input",
        None,
    )
    f = classify_exception(ThrottledError(2.5, "slow down"))
    assert (f.failure_class, f.error, f.retry_after) == (
        FailureClass.THROTTLED,
        "ThrottledError: slow down",
        2.5,
    )
    f = classify_exception(AmbiguousError("timeout after send"))
    assert f.failure_class is FailureClass.AMBIGUOUS
    f = classify_exception(KeyError("x"))
    assert (f.failure_class, f.error) == (FailureClass.TRANSIENT, "KeyError: 'x'")
    assert classify_exception(RuntimeError()).error == "RuntimeError"


def test_subclass_of_default_is_matched():
    class BadEmail(PermanentError):
        pass

    assert classify_exception(BadEmail("no @")).failure_class is FailureClass.PERMANENT


def test_user_mapping_wins_over_defaults_and_first_match_wins():
    mapping = {
        DeadlockError: FailureClass.TRANSIENT,
        DbError: "permanent",
        PermanentError: FailureClass.AMBIGUOUS,
    }
    assert classify_exception(DeadlockError(), mapping).failure_class is FailureClass.TRANSIENT
    assert classify_exception(DbError(), mapping).failure_class is FailureClass.PERMANENT
    assert classify_exception(PermanentError(), mapping).failure_class is FailureClass.AMBIGUOUS
    # base class listed first shadows the subclass entry
    shadowed = {DbError: FailureClass.PERMANENT, DeadlockError: FailureClass.TRANSIENT}
    assert classify_exception(DeadlockError(), shadowed).failure_class is FailureClass.PERMANENT


def test_user_throttled_mapping_reads_retry_after_attribute():
    f = classify_exception(RateLimited(7), {RateLimited: FailureClass.THROTTLED})
    assert (f.failure_class, f.retry_after) == (FailureClass.THROTTLED, 7.0)
    f = classify_exception(RateLimited("soon"), {RateLimited: FailureClass.THROTTLED})
    assert f.retry_after is None
    # mapped away from THROTTLED: no retry_after even if the exception has one
    assert classify_exception(ThrottledError(3), {ThrottledError: "transient"}).retry_after is None


def test_cancelled_class_depends_on_reason():
    assert classify_exception(Cancelled("cancel_requested")).failure_class is FailureClass.PERMANENT
    assert classify_exception(Cancelled("shutdown")).failure_class is FailureClass.TRANSIENT


def test_error_text_is_truncated_to_4096_chars():
    f = classify_exception(ValueError("x" * 10000))
    assert len(f.error) == 4096
    assert f.error.startswith("ValueError: xxx") and f.error.endswith("…")
    assert format_error(ValueError("short")) == "ValueError: short"


def test_coerce():
    assert FailureClass.coerce("FAILURE_CLASS_THROTTLED") is FailureClass.THROTTLED
    assert FailureClass.coerce(" ambiguous ") is FailureClass.AMBIGUOUS
    assert FailureClass.coerce(3) is FailureClass.PERMANENT
    for bad in ("fatal", 0, True, None):
        with pytest.raises(ValueError):
            FailureClass.coerce(bad)
