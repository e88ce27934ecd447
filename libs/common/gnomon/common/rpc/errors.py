"""Turns domain errors into rich gRPC statuses (google.rpc.Status + ErrorInfo + BadRequest).

One server interceptor (:class:`ErrorInterceptor`) wraps every handler of every service, so servicers
just raise :class:`gnomon.common.errors.GnomonError`. Unexpected exceptions become INTERNAL with a
fixed message (the traceback goes to the log, never to the caller). Sources: AIP-193 (errors),
https://grpc.io/docs/guides/error/ (richer error model).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import DOMAIN, GnomonError, InvalidArgument, QuotaExceeded, Unavailable

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the stubs make it generic; at run time it is not subscriptable
    Handler = grpc.RpcMethodHandler[Any, Any]


def to_status(err: GnomonError) -> grpc.Status:
    """Builds the ``grpc.Status`` (with ``grpc-status-details-bin``) for a domain error: an
    ``ErrorInfo`` always, a ``BadRequest`` for :class:`InvalidArgument`, a ``RetryInfo`` (the delay
    rounded up to whole milliseconds) for :class:`QuotaExceeded`."""
    details: list[Any] = []
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=err.metadata)
    details.append(info)
    if isinstance(err, QuotaExceeded):
        ms = max(0, math.ceil(err.retry_after_s * 1000))
        delay = duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    if isinstance(err, InvalidArgument):
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                    for v in err.violations
                ]
            )
        )
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    status = status_pb2.Status(code=getattr(code_pb2, err.code.name), message=err.message, details=packed)
    out: grpc.Status = rpc_status.to_status(status)
    return out


def classify(exc: BaseException) -> GnomonError:
    """Maps any exception to a domain error: database connection failures -> UNAVAILABLE, others INTERNAL."""
    if isinstance(exc, GnomonError):
        return exc
    if isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return Unavailable("database unavailable, nothing was written; retry later")
    if isinstance(exc, OSError):
        return Unavailable("dependency unavailable; retry later")
    log.error("unexpected error in RPC handler", exc_info=exc)
    return GnomonError("internal error", reason=ErrorReason.INTERNAL)


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Wraps unary and streaming handlers so domain errors abort with a rich status."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """Wraps unary-unary and stream-stream handlers (the kinds Gnomon serves); others pass."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        if handler.unary_unary:
            inner: Callable[..., Any] = handler.unary_unary  # a coroutine function on an aio server

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                try:
                    return await inner(request, context)
                except BaseException as exc:
                    await _abort(exc, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            inner_ss: Callable[..., Any] = handler.stream_stream  # an async generator function on aio

            async def stream_stream(
                request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                try:
                    async for item in inner_ss(request_iterator, context):
                        yield item
                except BaseException as exc:
                    await _abort(exc, context)

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=handler.request_deserializer,
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
