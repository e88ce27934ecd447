"""What every resource part of :class:`~gnomon.sdk.AsyncClient` shares: the ``grpc.aio`` channel, the
service stubs, the call metadata and deadline, one RPC wrapper that turns ``grpc.RpcError`` into
:class:`~gnomon.sdk.GnomonError`, and the page-token loop behind every ``list_*`` iterator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from gnomon._proto.gnomon.v1 import (
    access_service_pb2_grpc,
    cluster_service_pb2_grpc,
    dead_letter_service_pb2_grpc,
    job_service_pb2_grpc,
    namespace_service_pb2_grpc,
    queue_service_pb2_grpc,
    schedule_service_pb2_grpc,
)

from .connection import DEFAULT_ADDRESS, resolve
from .errors import GnomonError
from .tracing import outgoing_metadata

__all__ = ["ClientBase", "paginate", "DEFAULT_API", "Payload", "Span"]

T = TypeVar("T")

#: Where the API listens by default (``gnomon dev``), when no profile or variable says otherwise.
DEFAULT_API = DEFAULT_ADDRESS

#: A job payload: ``bytes`` (sent unchanged), ``str`` (UTF-8) or ``dict``/``list`` (compact JSON).
Payload = bytes | bytearray | str | dict[str, Any] | list[Any] | None
#: A span: ``timedelta`` or seconds (``int``/``float``).
Span = timedelta | float | int


def _stub(factory: Callable[[grpc.aio.Channel], T], channel: grpc.aio.Channel) -> T:
    return factory(channel)


class ClientBase:
    """Connection state of an :class:`~gnomon.sdk.AsyncClient` (arguments: see there); ``connection``
    is the resolved :class:`~gnomon.sdk.connection.Connection`.

    Create it inside a running event loop (``grpc.aio`` binds the channel to it).
    """

    def __init__(
        self,
        api: str | None = None,
        namespace: str | None = None,
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
        api_key: str | None = None,
        insecure: bool | None = None,
        profile: str | None = None,
    ) -> None:
        conn = resolve(api, namespace, api_key=api_key, insecure=insecure, profile=profile)
        self.connection = conn
        self.api = conn.address
        self.namespace = conn.namespace
        self.timeout = timeout
        self._metadata = tuple(metadata or ())
        opts = list(channel_options or ())
        if credentials is None:
            self._channel = conn.aio_channel(options=opts, unary_only=True)  # the client's RPCs are all unary
        else:
            self._channel = grpc.aio.secure_channel(
                conn.address, credentials, options=[*conn.options(), *opts]
            )
        self._jobs = _stub(job_service_pb2_grpc.JobServiceStub, self._channel)
        self._cluster = _stub(cluster_service_pb2_grpc.ClusterServiceStub, self._channel)
        self._queues = _stub(queue_service_pb2_grpc.QueueServiceStub, self._channel)
        self._schedules = _stub(schedule_service_pb2_grpc.ScheduleServiceStub, self._channel)
        self._dead_letters = _stub(dead_letter_service_pb2_grpc.DeadLetterServiceStub, self._channel)
        self._namespaces = _stub(namespace_service_pb2_grpc.NamespaceServiceStub, self._channel)
        self._access = _stub(access_service_pb2_grpc.AccessServiceStub, self._channel)

    async def _call(self, rpc: Any, request: Message, timeout: float | None = None) -> Any:
        """Calls the unary ``rpc`` with this client's metadata (plus the W3C trace context of the
        caller's current span, if any) and deadline (``timeout`` seconds, default the client's);
        returns the response message.

        Raises:
            GnomonError: the RPC failed (code, message, reason, field violations).
        """
        try:
            md = outgoing_metadata(self._metadata)  # the caller's trace context, if any
            return await rpc(request, timeout=timeout or self.timeout, metadata=md or None)
        except grpc.RpcError as err:
            raise GnomonError.from_rpc_error(err) from None

    async def close(self) -> None:
        """Closes the channel (calls in flight are cancelled). Idempotent."""
        await self._channel.close()


async def paginate(fetch: Callable[[str], Awaitable[tuple[list[T], str]]]) -> AsyncIterator[T]:
    """Every item of every page: calls ``fetch(page_token)`` (first with ``""``) until a page comes
    back with an empty next token, lazily (the next page is fetched when the current one is used up).

    Raises (while iterating): whatever ``fetch`` raises, typically :class:`GnomonError`.
    """
    token = ""
    while True:
        items, token = await fetch(token)
        for item in items:
            yield item
        if not token:
            return
