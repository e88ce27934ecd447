"""Wrapped method handlers, built once per method instead of once per call.

A ``grpc.aio.ServerInterceptor`` is asked for the handler of every call it sees. The interceptors
here (errors, authentication) wrap the registered handler in closures; building those closures and a
new ``RpcMethodHandler`` on every call cost ~50-100 microseconds of the API's CPU per call (yappi,
64 concurrent CreateJob). The handler a continuation returns for a method is the same object on
every call (the registered one, or the inner interceptor's cached wrapper), so the wrapper is kept
per method and reused while the inner handler stays the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stubs make it generic; at run time it is not subscriptable
    import grpc

    Handler = grpc.RpcMethodHandler[Any, Any]


class HandlerCache:
    """Per method: the inner handler last seen and its wrapper. Bounded by the number of served
    methods (unknown methods have no handler and are never cached)."""

    __slots__ = ("_wrapped",)

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    def wrapped(self, method: str, handler: Handler, wrap: Callable[[], Handler]) -> Handler:
        """The wrapper of ``handler`` for ``method``: the cached one when ``handler`` is the very
        object it was built from, else ``wrap()``, cached."""
        got = self._wrapped.get(method)
        if got is not None and got[0] is handler:
            return got[1]
        out = wrap()
        self._wrapped[method] = (handler, out)
        return out
