"""gRPC server bootstrap shared by every service: aio server + error and auth interceptors + health +
reflection.

Every server exposes ``grpc.health.v1.Health`` and server reflection (``grpc.reflection.v1alpha``;
grpcio-reflection 1.85 serves only v1alpha, not v1), so
``grpcurl -plaintext HOST:PORT list`` works against any Gnomon process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gnomon.common.rpc.auth import AuthInterceptor
from gnomon.common.rpc.errors import ErrorInterceptor

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class GrpcServer:
    """An aio gRPC server with health and reflection.

    ``services`` is a list of ``(add_to_server_fn, servicer, full_service_name)``. ``listen`` is
    ``host:port`` (port 0 picks a free one; :attr:`port` tells which). Health starts NOT_SERVING
    until :meth:`set_serving` is called.
    """

    def __init__(
        self, listen: str, services: Iterable[tuple[Callable[[Any, Any], None], object, str]]
    ) -> None:
        self.server = grpc.aio.server(
            # the error interceptor is outermost, so a refusal by the auth seam is a rich status too
            interceptors=[ErrorInterceptor(), AuthInterceptor()],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.names = []
        for add, servicer, name in services:
            add(servicer, self.server)
            self.names.append(name)
        reflection.enable_server_reflection(
            [
                *self.names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self.server,
        )
        self.port = self.server.add_insecure_port(listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        self.host = listen.rsplit(":", 1)[0]

    @property
    def address(self) -> str:
        """``host:port`` actually bound."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Starts serving (health still NOT_SERVING)."""
        await self.server.start()
        await self._set(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def set_serving(self, serving: bool = True) -> None:
        """Marks the overall and per-service health SERVING (or NOT_SERVING)."""
        await self._set(
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )

    async def _set(self, status: int) -> None:
        for name in ["", *self.names]:
            await self.health.set(name, status)

    async def stop(self, grace_s: float) -> None:
        """Stops accepting calls, lets running ones finish for ``grace_s`` seconds."""
        await self._set(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace_s)
