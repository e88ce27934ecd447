"""gRPC server bootstrap shared by every service: aio server + error and auth interceptors + health +
reflection, over TLS.

Every server exposes ``grpc.health.v1.Health`` (open to anyone) and server reflection
(``grpc.reflection.v1alpha``; grpcio-reflection 1.85 serves only v1alpha, not v1; who may use it is
``GNOMON_AUTH_REFLECTION``), so ``grpcurl -cacert ca.pem -H "authorization: Bearer $KEY" HOST:PORT list``
works against any Gnomon process. :func:`secure_server` is how a service builds one: TLS and
authentication from the settings, or a refusal to start without them (docs/security.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as reflection_module

from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.auth.settings import AuthSettings, InsecureSettings
from gnomon.common.rpc.admission import Admitter
from gnomon.common.rpc.audit import AuditLog
from gnomon.common.rpc.auth import AuthInterceptor
from gnomon.common.rpc.errors import ErrorInterceptor
from gnomon.common.tls import server_credentials

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)


class InsecureRefused(RuntimeError):
    """A service was asked to serve without TLS and without ``GNOMON_INSECURE=true``."""


MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class GrpcServer:
    """An aio gRPC server with health and reflection.

    ``services`` is a list of ``(add_to_server_fn, servicer, full_service_name)``. ``listen`` is
    ``host:port`` (port 0 picks a free one; :attr:`port` tells which). ``authenticator`` decides who
    calls (required: pass ``Authenticator(None, insecure=True)`` for an open test server);
    ``audit`` records mutating calls; ``credentials`` are the listener's TLS (None: plaintext);
    ``reflection``: ``open``, ``authenticated`` or ``off``; ``admitter``: the job admission the
    authorization interceptor binds to each call of a method that declares one
    (:mod:`gnomon.common.rpc.admission`; None: no job quotas). Health starts NOT_SERVING until
    :meth:`set_serving` is called.
    """

    def __init__(
        self,
        listen: str,
        services: Iterable[tuple[Callable[[Any, Any], None], object, str]],
        *,
        authenticator: Authenticator,
        audit: AuditLog | None = None,
        credentials: grpc.ServerCredentials | None = None,
        reflection: str = "authenticated",
        admitter: Admitter | None = None,
    ) -> None:
        self.audit = audit
        self.tls = credentials is not None
        self.server = grpc.aio.server(
            # the error interceptor is outermost, so a refusal by the auth seam is a rich status too
            interceptors=[
                ErrorInterceptor(),
                AuthInterceptor(authenticator, audit=audit, reflection=reflection, admitter=admitter),
            ],
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
        if reflection != "off":
            reflection_names = [
                *self.names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection_module.SERVICE_NAME,
            ]
            reflection_module.enable_server_reflection(reflection_names, self.server)
        if credentials is None:
            self.port = self.server.add_insecure_port(listen)
        else:
            self.port = self.server.add_secure_port(listen, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        self.host = listen.rsplit(":", 1)[0]

    @property
    def address(self) -> str:
        """``host:port`` actually bound."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Starts serving (health still NOT_SERVING) and the audit writer."""
        if self.audit is not None:
            self.audit.start()
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
        if self.audit is not None:
            await self.audit.stop()


def secure_server(
    listen: str,
    services: Iterable[tuple[Callable[[Any, Any], None], object, str]],
    engine: AsyncEngine | None,
    *,
    role: str,
    admitter: Admitter | None = None,
) -> GrpcServer:
    """The server of service ``role`` (``api``, ``dispatcher``, ...) as the settings say: TLS from
    ``GNOMON_TLS_*``, authentication from ``GNOMON_AUTH_*`` against ``engine`` (principals and API
    keys), mutating calls audited to ``engine``, job admission by ``admitter`` (see :class:`GrpcServer`).

    Raises :class:`InsecureRefused` when no TLS certificate is configured and ``GNOMON_INSECURE`` is
    not true; with it, serves plaintext without authentication and logs a warning saying so (at every
    start). Raises ``ValueError``/``OSError`` for unusable TLS or JWT settings.
    """
    insecure = InsecureSettings().insecure
    credentials = server_credentials()
    if credentials is None and not insecure:
        raise InsecureRefused(
            f"gnomon {role}: refusing to start without TLS: set GNOMON_TLS_CERT_FILE and GNOMON_TLS_KEY_FILE "
            "(docs/security.md), or GNOMON_INSECURE=true to serve plaintext with no authentication"
        )
    if insecure:
        log.warning(
            "gnomon %s: INSECURE: GNOMON_INSECURE=true, so %s and every caller may do everything "
            "(no authentication, no authorization)",
            role,
            "TLS is on but" if credentials is not None else "plaintext,",
        )
    settings = AuthSettings()
    return GrpcServer(
        listen,
        services,
        authenticator=Authenticator.from_settings(engine),
        audit=AuditLog(engine) if engine is not None else None,
        credentials=credentials,
        reflection=settings.reflection,
        admitter=admitter,
    )
