"""Authentication and authorization of every call, in one place: :class:`AuthInterceptor`.

Installed by :class:`gnomon.common.rpc.server.GrpcServer` on every server, before any handler (so
before any storage access). For each call it

1. answers health checks without a credential (and reflection as ``GNOMON_AUTH_REFLECTION`` says);
2. authenticates the caller (:class:`gnomon.common.auth.authenticator.Authenticator`): no valid
   credential is UNAUTHENTICATED;
3. authorizes the method against :data:`gnomon.common.auth.policy.POLICY`: the permission must be
   held in the namespace the request names (its ``parent``, ``name`` or the rule's ``field``) or
   cluster-wide. A caller without it gets PERMISSION_DENIED whether or not the resource exists, so it
   learns nothing about the namespace (https://google.aip.dev/211). Methods without a rule are refused;
4. makes the :class:`Caller` available to the handler (:func:`current_caller`), binds the method's
   job admission to the authorized namespace (:func:`gnomon.common.rpc.admission.current_admit`, as
   the rule's ``admits`` declares: the one place admission is decided) and, for mutating
   methods, records one audit entry with the authenticated principal and the outcome
   (:class:`gnomon.common.rpc.audit.AuditLog`); an authorized mutating call runs only once its entry
   is reserved (``UNAVAILABLE``, reason ``AUDIT_UNAVAILABLE``, when the audit buffer, or the
   principal's share of it, is full).

The worker stream (``STREAM`` scope) is authenticated here; the dispatcher checks the hello's
namespace and queues against :meth:`Principal.worker_queues` once it arrives.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from google.protobuf.message import Message

from gnomon.common.auth.authenticator import INSECURE, Authenticator
from gnomon.common.auth.policy import POLICY, PUBLIC_SERVICES, REFLECTION_SERVICES, Rule, Scope
from gnomon.common.auth.principals import ALL, Principal
from gnomon.common.errors import FieldViolation, GnomonError, InvalidArgument, PermissionDenied
from gnomon.common.names import namespace_of
from gnomon.common.rpc import admission
from gnomon.common.rpc.errors import check_request
from gnomon.common.rpc.handlers import HandlerCache


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one RPC: its ``principal`` and gRPC ``peer`` (e.g. ``ipv4:127.0.0.1:5123``)."""

    principal: Principal
    peer: str

    @property
    def actor(self) -> str:
        """The audit log's actor: the principal's name (never a client-claimed value)."""
        return self.principal.name


#: The ``parent`` of the cluster-wide entries (namespace ``*``) where a rule allows it
#: (:attr:`Rule.cluster_parent`: ListAuditEntries).
CLUSTER_PARENT = f"namespaces/{ALL}"

#: The caller of a handler invoked without the interceptor (in-process tests): may do everything.
ANONYMOUS = Caller(INSECURE, "unknown")

_CURRENT: ContextVar[Caller | None] = ContextVar("gnomon_caller", default=None)
#: Callers of open streams, by ``id`` of their servicer context (a stream handler is an async
#: generator, which must not carry a context variable across its ``yield`` s).
_STREAMS: dict[int, Caller] = {}
#: The authenticator that admitted each open stream (for :func:`reauthenticate`).
_STREAM_AUTH: dict[int, Authenticator] = {}


async def reauthenticate(context: Any) -> Caller:
    """Authenticates the open stream served with ``context`` again, with the credential it opened
    with (a long-lived stream must not outlive a revoked key, a disabled principal or a removed
    grant: the dispatcher calls this every ``GNOMON_AUTH_CACHE_S``). Returns the current caller
    (its grants as they are now). Raises :class:`gnomon.common.errors.Unauthenticated` when the
    credential is no longer valid, ``Unavailable`` when it cannot be checked (database down), and
    ``KeyError`` for a context that is not an open, admitted stream."""
    authenticator = _STREAM_AUTH[id(context)]
    principal = await authenticator.authenticate(
        context.invocation_metadata() or (), context.auth_context() or {}
    )
    caller = Caller(principal, _STREAMS[id(context)].peer)
    _STREAMS[id(context)] = caller
    return caller


def current_caller(context: Any = None) -> Caller:
    """The caller of the RPC being handled: for a stream, the one its ``context`` was admitted with;
    for a unary call, the one set by :class:`AuthInterceptor`; else :data:`ANONYMOUS`."""
    if context is not None and (streaming := _STREAMS.get(id(context))) is not None:
        return streaming
    caller = _CURRENT.get()
    return caller if caller is not None else ANONYMOUS


def _field(request: Any, path: str) -> Any:
    value = request
    for part in path.split("."):
        if not hasattr(value, part):
            return None
        value = getattr(value, part)
    return value


def request_namespace(request: Any, rule: Rule) -> tuple[str | None, str]:
    """``(namespace, source field)`` a request acts on: its ``parent`` (empty = the default
    namespace, unless the request also has a non-empty ``name``, as SimulateOutage's one-schedule
    form; ``namespaces/*`` = :data:`ALL` when the rule allows ``cluster_parent``), else ``name``, else
    the rule's ``field`` (a namespace id or a name under one).
    The namespace is None when the field is malformed (the caller gets INVALID_ARGUMENT)."""
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    if rule.field:
        value = _field(request, rule.field)
        if isinstance(value, str) and "/" not in value and value:
            return (value if value == ALL else namespace_of(f"namespaces/{value}")), rule.field
        return (namespace_of(value) if isinstance(value, str) else None), rule.field
    if "parent" in fields and (request.parent or not getattr(request, "name", "")):
        if rule.cluster_parent and request.parent == CLUSTER_PARENT:
            return ALL, "parent"
        return namespace_of(request.parent, parent=True), "parent"
    if "name" in fields:
        return namespace_of(request.name), "name"
    return None, "name"


def authorize(principal: Principal, rule: Rule, request: Any) -> str | None:
    """Checks ``principal`` against ``rule`` for ``request``; returns the namespace acted on (None for
    cluster-wide and authenticated-only rules). Raises :class:`PermissionDenied` (reason
    NAMESPACE_NOT_ALLOWED, metadata ``namespace``) or :class:`InvalidArgument` (the namespace field
    is malformed)."""
    if rule.scope in (Scope.AUTHENTICATED, Scope.STREAM) or rule.permission is None:
        return None
    if rule.optional_name and not getattr(request, "name", ""):
        return None  # e.g. a preview of an unsaved rule: nothing of any namespace is read
    if rule.scope is Scope.CLUSTER:
        if not principal.can(rule.permission, ALL):
            raise PermissionDenied("this method needs a cluster-wide grant the caller does not hold")
        return None
    ns, source = request_namespace(request, rule)
    if ns is None:
        raise InvalidArgument([FieldViolation(source, "must name a namespace: namespaces/{namespace}[/...]")])
    if not principal.can(rule.permission, ns):
        raise PermissionDenied(
            f"the caller may not call this method in namespace {ns!r}", metadata={"namespace": ns}
        )
    return ns


class AuditSink(Protocol):
    """Where the interceptor records mutating calls (see :class:`gnomon.common.rpc.audit.AuditLog`)."""

    def admit(self, caller: Caller) -> None:
        """Reserves the entry of ``caller``'s authorized call about to run; raises ``Unavailable``
        (reason AUDIT_UNAVAILABLE) when no more can be buffered, or when ``caller``'s principal holds
        its share of the buffer, so the call is refused, not run unaudited."""

    def record(
        self,
        *,
        caller: Caller,
        method: str,
        namespace: str | None,
        request: Any,
        response: Any,
        outcome: str,
        admitted: bool = False,
    ) -> None:
        """Records one call (never raises, never blocks); ``admitted``: :meth:`admit` reserved its entry."""


if TYPE_CHECKING:  # the stubs make it generic; at run time it is not subscriptable
    Handler = grpc.RpcMethodHandler[Any, Any]


def _outcome(exc: BaseException, context: Any) -> str:
    if isinstance(exc, GnomonError):
        return exc.code.name
    code = context.code() if hasattr(context, "code") else None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def _checked_only(handler: Handler) -> Handler:
    """A public unary handler whose request is checked (:func:`check_request`) but not authenticated."""
    if not handler.unary_unary:
        return handler
    inner: Callable[..., Any] = handler.unary_unary

    async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        check_request(request)
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(
        unary_unary,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates and authorizes every call (see the module docstring). ``reflection``: ``open``,
    ``authenticated`` or ``off``; ``audit``: sink for mutating calls (None: not recorded);
    ``admitter``: the job admission of each call of a method that declares one (None: this server
    enforces no job quotas)."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        audit: AuditSink | None = None,
        reflection: str = "authenticated",
        admitter: admission.Admitter | None = None,
    ) -> None:
        self.authenticator, self.audit, self.reflection = authenticator, audit, reflection
        self.admitter = admitter
        self._cache = HandlerCache()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """Wraps every handler but the public ones with authentication and authorization."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        return self._cache.wrapped(method, handler, lambda: self._handler(method, handler))

    def _handler(self, method: str, handler: Handler) -> Handler:
        """``handler`` of ``method`` wrapped as its rule requires (built once per method)."""
        service = method.split("/")[1] if method.count("/") == 2 else ""
        if service in PUBLIC_SERVICES:
            return _checked_only(handler)
        if service in REFLECTION_SERVICES:
            if self.reflection == "open":
                return handler
            rule: Rule | None = None if self.reflection == "off" else Rule(None, Scope.AUTHENTICATED)
        else:
            rule = POLICY.get(method)
        return self._wrap(handler, method, rule)

    async def _caller(self, context: Any) -> Caller:
        """The authenticated caller of the call served with ``context`` (raises Unauthenticated)."""
        principal = await self.authenticator.authenticate(
            context.invocation_metadata() or (), context.auth_context() or {}
        )
        return Caller(principal, (context.peer() or "unknown")[:128])

    @staticmethod
    def _permit(caller: Caller, method: str, rule: Rule | None, request: Any) -> str | None:
        """Checks ``request`` (when given) and authorizes ``caller`` for ``method``; returns the
        namespace acted on. Raises PermissionDenied (no rule, or no grant) or InvalidArgument."""
        if rule is None:
            raise PermissionDenied(f"method {method[:100]} is not open to callers")
        if request is not None:
            check_request(request)
        return authorize(caller.principal, rule, request)

    async def _admit(self, context: Any, method: str, rule: Rule | None, request: Any) -> Caller:
        caller = await self._caller(context)
        self._permit(caller, method, rule, request)
        return caller

    def _wrap(self, handler: Handler, method: str, rule: Rule | None) -> Handler:
        if handler.unary_unary:
            inner: Callable[..., Any] = handler.unary_unary
            audit = self.audit if rule is not None and rule.mutating else None
            # the namespace an audited call aimed at, known even when the call is refused
            aimed = rule is not None and rule.scope is Scope.NAMESPACE

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                # A call without a valid credential is refused here and never audited (nobody to
                # record, and recording it would let anyone fill the log); an audited call refused
                # for its input or its grants is recorded against the namespace it aimed at. An
                # authorized one runs only once its entry is reserved (UNAVAILABLE when the audit
                # buffer, or the caller's share of it, is full: never an unaudited success).
                caller = await self._caller(context)
                ns: str | None = None
                response, outcome, admitted = None, "OK", False
                token = _CURRENT.set(caller)
                try:
                    if audit is not None and aimed and isinstance(request, Message):
                        ns = request_namespace(request, rule)[0]  # type: ignore[arg-type]
                    ns = self._permit(caller, method, rule, request) or ns
                    if audit is not None:
                        audit.admit(caller)
                        admitted = True
                    with admission.bound(self.admitter, method, rule, ns):
                        response = await inner(request, context)
                    return response
                except BaseException as exc:
                    outcome = _outcome(exc, context)
                    raise
                finally:
                    _CURRENT.reset(token)
                    if audit is not None:
                        audit.record(
                            caller=caller,
                            method=method,
                            namespace=ns,
                            request=request,
                            response=response,
                            outcome=outcome,
                            admitted=admitted,
                        )

            return grpc.unary_unary_rpc_method_handler(
                unary_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            inner_ss: Callable[..., Any] = handler.stream_stream
            if not inspect.isasyncgenfunction(inner_ss):
                raise TypeError(f"{method}: stream handlers must be async generators")

            async def stream_stream(
                request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                if rule is not None and rule.scope is Scope.NAMESPACE:
                    raise PermissionDenied(f"method {method[:100]} is not open to callers")
                caller = await self._admit(context, method, rule, None)
                _STREAMS[id(context)] = caller
                _STREAM_AUTH[id(context)] = self.authenticator
                try:
                    async for item in inner_ss(request_iterator, context):
                        yield item
                finally:
                    _STREAMS.pop(id(context), None)
                    _STREAM_AUTH.pop(id(context), None)

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            inner_us: Callable[..., Any] = handler.unary_stream

            async def unary_stream(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                caller = await self._admit(context, method, rule, request)
                _STREAMS[id(context)] = caller
                try:
                    async for item in inner_us(request, context):
                        yield item
                finally:
                    _STREAMS.pop(id(context), None)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise TypeError(f"{method}: stream-unary handlers are not served")
