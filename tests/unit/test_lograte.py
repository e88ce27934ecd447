"""The log rate limiter (:mod:`gnomon.common.lograte`) and its use by the error interceptor's
classification of unexpected faults: a client that repeats a failing call cannot fill the log."""

from __future__ import annotations

import logging

import grpc

from gnomon.common import lograte
from gnomon.common.lograte import LogLimiter
from gnomon.common.rpc.errors import classify, fault_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_key_per_interval_then_a_suppressed_count(caplog):
    clock = Clock()
    limiter = LogLimiter(60.0, clock=clock)
    log = logging.getLogger("test.lograte")
    caplog.set_level(logging.INFO, logger="test.lograte")
    emitted = [limiter.log(log, logging.ERROR, "k", "boom %s", i) for i in range(1000)]
    assert emitted.count(True) == 1 and [r.getMessage() for r in caplog.records] == ["boom 0"]
    assert limiter.log(log, logging.ERROR, "other", "another kind")  # keys are independent
    clock.now += 59.9
    assert not limiter.log(log, logging.ERROR, "k", "boom late")
    clock.now += 0.2
    assert limiter.log(log, logging.ERROR, "k", "boom again")
    assert caplog.records[-1].getMessage() == "boom again [suppressed 1000 identical lines in 60 s]"
    clock.now += 61
    assert limiter.log(log, logging.ERROR, "k", "quiet since")
    assert caplog.records[-1].getMessage() == "quiet since"  # nothing suppressed in between: no count


def test_the_same_key_on_another_logger_is_another_line(caplog):
    limiter = LogLimiter(60.0, clock=Clock())
    caplog.set_level(logging.INFO)
    assert limiter.log(logging.getLogger("a"), logging.WARNING, "k", "x")
    assert limiter.log(logging.getLogger("b"), logging.WARNING, "k", "x")
    assert not limiter.log(logging.getLogger("a"), logging.WARNING, "k", "x")


def test_the_key_table_is_bounded():
    clock = Clock()
    limiter = LogLimiter(60.0, max_keys=3, clock=clock)
    for i in range(100):
        assert limiter.allow("l", f"k{i}")[0]
    assert len(limiter._seen) == 3
    assert not limiter.allow("l", "k99")[0]  # the most recent keys are remembered


def test_interval_zero_lets_every_line_through():
    limiter = LogLimiter(0.0, clock=Clock())
    assert all(limiter.allow("l", "k")[0] for _ in range(5))


def _fault(i: int) -> BaseException:
    table: dict[str, int] = {}
    try:
        table[f"client-chosen-{i}"]
    except KeyError as exc:
        return exc
    raise AssertionError


def test_unexpected_handler_faults_log_one_traceback_per_kind(caplog, monkeypatch):
    monkeypatch.setattr(lograte, "_SHARED", LogLimiter(60.0))
    caplog.set_level(logging.INFO, logger="gnomon.common.rpc.errors")
    faults = [_fault(i) for i in range(500)]
    assert len({fault_key(f) for f in faults}) == 1  # the key holds no client text
    for f in faults:
        assert classify(f).code == grpc.StatusCode.INTERNAL
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_not_implemented_is_unimplemented_and_not_logged(caplog):
    caplog.set_level(logging.INFO, logger="gnomon.common.rpc.errors")
    err = classify(NotImplementedError("Method not implemented!"))
    assert err.code == grpc.StatusCode.UNIMPLEMENTED and err.reason == "METHOD_NOT_IMPLEMENTED"
    assert not caplog.records


def test_another_not_implemented_error_is_a_fault_of_ours():
    err = classify(NotImplementedError("dialect feature missing"))
    assert err.code == grpc.StatusCode.INTERNAL
