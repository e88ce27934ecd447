"""Turns domain errors into rich gRPC statuses (google.rpc.Status + ErrorInfo + BadRequest).

One server interceptor (:class:`ErrorInterceptor`) wraps every handler of every service, so servicers
just raise :class:`gnomon.common.errors.GnomonError`. Unexpected exceptions become INTERNAL with a
fixed message (the traceback goes to the log, never to the caller). Sources: AIP-193 (errors),
https://grpc.io/docs/guides/error/ (richer error model).

Two edge rules hold for every service here, once:

* a unary request with a NUL in any string field is refused with INVALID_ARGUMENT naming the field
  (:mod:`gnomon.common.rpc.inputs`: PostgreSQL text cannot hold NUL);
* a request body that is not a valid protobuf message of the method's request type is refused with
  INVALID_ARGUMENT, reason ``MALFORMED_REQUEST`` and a fixed message (never the parser's text);
* error text that may echo client input is clipped (:func:`clip_text`): the status message to
  :data:`MAX_MESSAGE_CHARS`, each field name to :data:`MAX_FIELD_CHARS`, each violation description and
  ``ErrorInfo`` metadata value to :data:`MAX_DETAIL_CHARS` characters, at most
  :data:`MAX_VIOLATIONS` violations (then one summary), so a reply stays well under 8 KiB whatever
  the request held.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from gnomon.common import lograte
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import (
    DOMAIN,
    FieldViolation,
    GnomonError,
    InvalidArgument,
    QuotaExceeded,
    Unavailable,
)
from gnomon.common.rpc.handlers import HandlerCache
from gnomon.common.rpc.inputs import nul_violations

log = logging.getLogger(__name__)

#: Longest status message sent, characters (longer ones end in an ellipsis).
MAX_MESSAGE_CHARS = 512
#: Longest BadRequest field path sent, characters.
MAX_FIELD_CHARS = 128
#: Longest violation description or ErrorInfo metadata value sent, characters.
MAX_DETAIL_CHARS = 200
#: Most field violations sent in one BadRequest (the rest are counted in one more).
MAX_VIOLATIONS = 20
#: The message of a request that does not parse (fixed: no parser text reaches the caller).
MALFORMED_MESSAGE = "the request body is not a valid protobuf message for this method"

if TYPE_CHECKING:  # the stubs make it generic; at run time it is not subscriptable
    Handler = grpc.RpcMethodHandler[Any, Any]


def clip_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (the last one then an ellipsis ``…``)."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


def to_status(err: GnomonError) -> grpc.Status:
    """Builds the ``grpc.Status`` (with ``grpc-status-details-bin``) for a domain error: an
    ``ErrorInfo`` always, a ``BadRequest`` for :class:`InvalidArgument`, a ``RetryInfo`` (the delay
    rounded up to whole milliseconds) for :class:`QuotaExceeded`. Every text that may echo client
    input is clipped (module docstring), so the size is bounded."""
    details: list[Any] = []
    metadata = {
        clip_text(k, MAX_FIELD_CHARS): clip_text(v, MAX_DETAIL_CHARS)
        for k, v in list(err.metadata.items())[:MAX_VIOLATIONS]
    }
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=metadata)
    details.append(info)
    if isinstance(err, QuotaExceeded):
        ms = max(0, math.ceil(err.retry_after_s * 1000))
        delay = duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    if isinstance(err, InvalidArgument):
        shown = [
            error_details_pb2.BadRequest.FieldViolation(
                field=clip_text(v.field, MAX_FIELD_CHARS),
                description=clip_text(v.description, MAX_DETAIL_CHARS),
            )
            for v in err.violations[:MAX_VIOLATIONS]
        ]
        if len(err.violations) > MAX_VIOLATIONS:
            shown.append(
                error_details_pb2.BadRequest.FieldViolation(
                    field="request", description=f"{len(err.violations) - MAX_VIOLATIONS} more violations"
                )
            )
        details.append(error_details_pb2.BadRequest(field_violations=shown))
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    status = status_pb2.Status(
        code=getattr(code_pb2, err.code.name),
        message=clip_text(err.message, MAX_MESSAGE_CHARS),
        details=packed,
    )
    out: grpc.Status = rpc_status.to_status(status)
    return out


#: The message of the ``NotImplementedError`` a grpcio-generated servicer base method raises.
GENERATED_UNIMPLEMENTED = "Method not implemented!"


def classify(exc: BaseException) -> GnomonError:
    """Maps any exception to a domain error: database connection failures -> UNAVAILABLE,
    the ``NotImplementedError`` of a generated servicer method the service does not implement
    (:data:`GENERATED_UNIMPLEMENTED`) -> UNIMPLEMENTED
    (``METHOD_NOT_IMPLEMENTED``), others INTERNAL (logged at ERROR with the traceback, at most once
    per ``GNOMON_LOG_REPEAT_INTERVAL_S`` per kind of fault: :func:`fault_key`)."""
    if isinstance(exc, GnomonError):
        return exc
    if isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return Unavailable("database unavailable, nothing was written; retry later")
    if isinstance(exc, OSError):
        return Unavailable("dependency unavailable; retry later")
    if isinstance(exc, NotImplementedError) and exc.args == (GENERATED_UNIMPLEMENTED,):
        # a generated servicer base's method the service does not implement (grpc's own stubs raise
        # NotImplementedError after setting UNIMPLEMENTED, which an aio server would answer UNKNOWN);
        # any other NotImplementedError is a fault of ours and goes on to INTERNAL below
        return GnomonError(
            "method not implemented by this service", reason=ErrorReason.METHOD_NOT_IMPLEMENTED
        )
    lograte.shared().log(
        log,
        logging.ERROR,
        fault_key(exc),
        "unexpected error in RPC handler: %s",
        type(exc).__name__,
        exc_info=exc,
    )
    return GnomonError("internal error", reason=ErrorReason.INTERNAL)


def fault_key(exc: BaseException) -> str:
    """A low-cardinality key of an unexpected fault for :mod:`gnomon.common.lograte`: the exception's
    type and the file and line that raised it (never its message, which may hold client input)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"
    return f"{type(exc).__module__}.{type(exc).__qualname__}@{where}"


class _Malformed:
    """What a wrapped deserializer returns for bytes that do not parse (the handler then refuses)."""

    __slots__ = ()


_MALFORMED = _Malformed()


def malformed_request() -> InvalidArgument:
    """The error for a request body that does not parse: INVALID_ARGUMENT, reason
    ``MALFORMED_REQUEST``, a violation on ``request`` and the fixed :data:`MALFORMED_MESSAGE`."""
    return InvalidArgument(
        [FieldViolation("request", "is not a valid protobuf message of the method's request type")],
        MALFORMED_MESSAGE,
        reason=ErrorReason.MALFORMED_REQUEST,
    )


def safe_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserialize`` (bytes -> message) made total: bytes it cannot parse give a marker the
    interceptor's handler turns into :func:`malformed_request` (grpc would otherwise answer UNKNOWN
    with the parser's exception text). ``None`` (no deserializer: raw bytes) stays ``None``."""
    if deserialize is None:
        return None
    inner = deserialize

    def parse(data: bytes) -> Any:
        try:
            return inner(data)
        except Exception:  # DecodeError, or any parser fault on hostile bytes
            return _MALFORMED

    return parse


def check_request(request: Any) -> None:
    """Raises :func:`malformed_request` for a body that did not parse, :class:`InvalidArgument` for a
    NUL in any string field (PostgreSQL text cannot hold one). The authorization interceptor calls it
    right after authentication, so an unauthenticated caller learns nothing from its input's faults."""
    if request is _MALFORMED:
        raise malformed_request()
    if isinstance(request, Message) and (bad := nul_violations(request)):
        raise InvalidArgument(bad)


async def _checked(request_iterator: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The stream's requests; a message that did not parse raises :func:`malformed_request`."""
    async for item in request_iterator:
        if item is _MALFORMED:
            raise malformed_request()
        yield item


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Wraps unary and streaming handlers so domain errors abort with a rich status, and request
    bodies that do not parse abort with INVALID_ARGUMENT (``MALFORMED_REQUEST``)."""

    def __init__(self) -> None:
        self._cache = HandlerCache()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """Wraps unary-unary and stream-stream handlers (the kinds Gnomon serves); others pass."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self._cache.wrapped(handler_call_details.method, handler, lambda: self._wrap(handler))

    def _wrap(self, handler: Handler) -> Handler:
        if handler.unary_unary:
            inner: Callable[..., Any] = handler.unary_unary  # a coroutine function on an aio server

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                try:  # the request is checked (check_request) by the authorization interceptor
                    return await inner(request, context)
                except BaseException as exc:
                    await _abort(exc, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=safe_deserializer(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            inner_ss: Callable[..., Any] = handler.stream_stream  # an async generator function on aio

            async def stream_stream(
                request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                try:
                    async for item in inner_ss(_checked(request_iterator), context):
                        yield item
                except BaseException as exc:
                    await _abort(exc, context)

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=safe_deserializer(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


async def _abort(exc: BaseException, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    import asyncio

    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        raise exc
    if isinstance(exc, grpc.aio.AbortError) or type(exc).__name__ == "AbortError":
        raise exc
    err = classify(exc)
    await context.abort_with_status(to_status(err))
