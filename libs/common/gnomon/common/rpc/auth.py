"""Who is calling, and may they act on a namespace: the one authorization seam of every server.

:class:`AuthInterceptor` (installed by :class:`gnomon.common.rpc.server.GrpcServer` on every server)
runs before the handlers of the services under the namespace policy. It reads the :class:`Caller` from
the call metadata, makes it available to the handler through :func:`current_caller` (the audit log
records it) and checks the namespace the request names (its ``parent``, else its ``name``, parsed
by :func:`gnomon.common.names.namespace_of`) against the caller's namespaces, so no handler checks
namespaces itself. A malformed or missing name is left to the handler, which reports the field
(INVALID_ARGUMENT), exactly as before the seam existed.

Today there is no authentication: the caller's namespaces come from the ``x-gnomon-namespaces``
metadata a trusted gateway sets (comma-separated; absent = every namespace), and the policy covers
``gnomon.v1.DeadLetterService`` only (:data:`ENFORCED_SERVICES`). Authentication replaces
:meth:`Caller.from_metadata` with verified credentials and widens the policy; handlers do not change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from gnomon.common.errors import PermissionDenied
from gnomon.common.names import namespace_of

#: Call metadata: comma-separated namespaces the caller may act on (set by a trusted gateway).
NAMESPACES_HEADER = "x-gnomon-namespaces"
#: Call metadata: who the caller says they are, recorded in the audit log next to the gRPC peer.
ACTOR_HEADER = "x-gnomon-actor"
#: The actor header is cut to this many characters (after dropping control characters).
MAX_ACTOR = 200
#: Full names of the services whose requests are checked against the caller's namespaces.
ENFORCED_SERVICES = frozenset({"gnomon.v1.DeadLetterService"})


@dataclass(frozen=True)
class Caller:
    """The caller of one RPC: ``namespaces`` it may act on (None: every namespace), the claimed
    ``actor_header`` ("" if none) and the gRPC ``peer`` (e.g. ``ipv4:127.0.0.1:5123``)."""

    namespaces: frozenset[str] | None
    actor_header: str
    peer: str

    @property
    def actor(self) -> str:
        """``"{actor_header} ({peer})"``, or just the peer when no actor was claimed."""
        return f"{self.actor_header} ({self.peer})" if self.actor_header else self.peer

    @classmethod
    def from_metadata(cls, metadata: Iterable[tuple[str, str | bytes]], peer: str) -> Caller:
        """The caller described by the call's ``metadata`` and ``peer`` (see the module docstring)."""
        md = [(k.lower(), v if isinstance(v, str) else v.decode("utf-8", "replace")) for k, v in metadata]
        values = [v for k, v in md if k == NAMESPACES_HEADER]
        allowed = frozenset(n.strip() for v in values for n in v.split(",") if n.strip()) if values else None
        claimed = next((v for k, v in md if k == ACTOR_HEADER), "")
        claimed = "".join(ch for ch in claimed if ch.isprintable()).strip()[:MAX_ACTOR]
        return cls(allowed, claimed, peer or "unknown")

    @classmethod
    def from_context(cls, context: Any) -> Caller:
        """The caller of the RPC served with ``context`` (a ``grpc.aio.ServicerContext``; None gives
        an anonymous caller allowed every namespace, for handlers called directly in tests)."""
        if context is None:
            return ANONYMOUS
        return cls.from_metadata(context.invocation_metadata() or (), context.peer() or "unknown")


#: The caller of a handler invoked without a gRPC context.
ANONYMOUS = Caller(None, "", "unknown")

_CURRENT: ContextVar[Caller | None] = ContextVar("gnomon_caller", default=None)


def authorize(caller: Caller, namespace: str) -> None:
    """Raises :class:`PermissionDenied` (PERMISSION_DENIED, reason NAMESPACE_NOT_ALLOWED, metadata
    ``namespace``) unless ``caller`` may act on ``namespace``."""
    if caller.namespaces is not None and namespace not in caller.namespaces:
        raise PermissionDenied(
            f"namespace {namespace!r} is not among the caller's namespaces", metadata={"namespace": namespace}
        )


def current_caller(context: Any = None) -> Caller:
    """The caller of the RPC being handled: the one :class:`AuthInterceptor` read, else the one
    ``context`` describes (a handler called without the interceptor)."""
    caller = _CURRENT.get()
    return caller if caller is not None else Caller.from_context(context)


def request_namespace(request: Any) -> str | None:
    """The namespace a request acts on: its ``parent`` (empty = the default namespace), else its
    ``name``; None when neither field exists or the name is malformed."""
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    if "parent" in fields:
        return namespace_of(request.parent, parent=True)
    if "name" in fields:
        return namespace_of(request.name)
    return None


if TYPE_CHECKING:  # the stubs make it generic; at run time it is not subscriptable
    Handler = grpc.RpcMethodHandler[Any, Any]


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Enforces the namespace policy on the unary methods of the services in ``enforced`` (full
    service names, default :data:`ENFORCED_SERVICES`) and makes their caller available to the handler.
    Other methods pass unwrapped (no cost on the job hot path); their handlers read the caller from
    their context with :func:`current_caller` if they need it."""

    def __init__(self, enforced: frozenset[str] = ENFORCED_SERVICES):
        self.enforced = enforced

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """Wraps the unary-unary handlers of enforced services; everything else passes unchanged."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if method.count("/") != 2 or method.split("/")[1] not in self.enforced:
            return handler
        if handler.unary_unary:
            inner: Callable[..., Any] = handler.unary_unary  # a coroutine function on an aio server

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                caller = Caller.from_context(context)
                if (ns := request_namespace(request)) is not None:
                    authorize(caller, ns)
                token = _CURRENT.set(caller)
                try:
                    return await inner(request, context)
                finally:
                    _CURRENT.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler
