"""gnomon.sdk.errors: decoding GnomonError from a rich google.rpc.Status."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc.aio import AioRpcError, Metadata

from gnomon.sdk import GnomonError, ThrottledError
from gnomon.sdk.errors import decode_rich_status

KEY = "grpc-status-details-bin"


def _any(msg) -> any_pb2.Any:
    a = any_pb2.Any()
    a.Pack(msg)
    return a


def _status(code: int, message: str, *details) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message, details=[_any(d) for d in details])


class FakeSyncError(grpc.RpcError, grpc.Call):
    """What a failed sync call raises: an RpcError that is also a Call."""

    def __init__(self, code, details, trailing):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing

    def initial_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, cb):
        return False


def test_invalid_argument_with_reason_and_field_violations():
    msg = "2 invalid fields"
    st = _status(
        code_pb2.INVALID_ARGUMENT,
        msg,
        error_details_pb2.ErrorInfo(reason="INVALID_FIELD", domain="gnomon.dev", metadata={"n": "2"}),
        error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="queue", description="too long"),
                error_details_pb2.BadRequest.FieldViolation(field="delay", description="negative"),
            ]
        ),
    )
    err = GnomonError.from_rpc_error(
        FakeSyncError(grpc.StatusCode.INVALID_ARGUMENT, msg, ((KEY, st.SerializeToString()),))
    )
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT
    assert err.message == msg
    assert err.reason == "INVALID_FIELD"
    assert err.domain == "gnomon.dev"
    assert err.metadata == {"n": "2"}
    assert err.field_violations == [("queue", "too long"), ("delay", "negative")]
    assert str(err) == "INVALID_ARGUMENT: 2 invalid fields [INVALID_FIELD] (queue: too long; delay: negative)"


def test_aio_error_is_decoded_too():
    st = _status(code_pb2.NOT_FOUND, "job x not found", error_details_pb2.ErrorInfo(reason="JOB_NOT_FOUND"))
    aio = AioRpcError(
        grpc.StatusCode.NOT_FOUND,
        Metadata(),
        Metadata((KEY, st.SerializeToString())),
        details="job x not found",
    )
    err = GnomonError.from_rpc_error(aio)
    assert (err.code, err.message, err.reason, err.field_violations) == (
        grpc.StatusCode.NOT_FOUND,
        "job x not found",
        "JOB_NOT_FOUND",
        [],
    )


def test_plain_status_without_details():
    err = GnomonError.from_rpc_error(FakeSyncError(grpc.StatusCode.UNAVAILABLE, "connection refused", ()))
    assert (err.code, err.message, err.reason, err.field_violations) == (
        grpc.StatusCode.UNAVAILABLE,
        "connection refused",
        None,
        [],
    )
    err = GnomonError.from_rpc_error(FakeSyncError(grpc.StatusCode.UNAVAILABLE, "x", None))
    assert err.reason is None


def test_inconsistent_status_keeps_call_code_but_reads_details():
    st = _status(code_pb2.INTERNAL, "other message", error_details_pb2.ErrorInfo(reason="SHUTTING_DOWN"))
    err = GnomonError.from_rpc_error(
        FakeSyncError(grpc.StatusCode.UNAVAILABLE, "draining", ((KEY, st.SerializeToString()),))
    )
    assert err.code is grpc.StatusCode.UNAVAILABLE
    assert err.message == "draining"
    assert err.reason == "SHUTTING_DOWN"


def test_garbage_details_do_not_raise():
    err = GnomonError.from_rpc_error(
        FakeSyncError(grpc.StatusCode.INTERNAL, "boom", ((KEY, b"\xff\xff\xff"),))
    )
    assert (err.code, err.message, err.reason) == (grpc.StatusCode.INTERNAL, "boom", None)


def test_decode_rich_status_ignores_other_details_and_takes_first_error_info():
    st = _status(
        code_pb2.FAILED_PRECONDITION,
        "m",
        error_details_pb2.RetryInfo(),
        error_details_pb2.ErrorInfo(reason="FIRST"),
        error_details_pb2.ErrorInfo(reason="SECOND"),
    )
    reason, domain, metadata, violations = decode_rich_status(st)
    assert (reason, domain, metadata, violations) == ("FIRST", None, {}, [])


def test_gnomon_error_is_an_exception_with_repr():
    err = GnomonError(grpc.StatusCode.ALREADY_EXISTS, "request_id reused", "REQUEST_ID_REUSED")
    with pytest.raises(GnomonError) as info:
        raise err
    assert info.value.reason == "REQUEST_ID_REUSED"
    assert "ALREADY_EXISTS" in repr(err) and "REQUEST_ID_REUSED" in repr(err)


def test_throttled_error_validates_retry_after():
    assert ThrottledError(2).retry_after == 2.0
    assert "retry after 2s" in str(ThrottledError(2))
    with pytest.raises(ValueError):
        ThrottledError(-1)
