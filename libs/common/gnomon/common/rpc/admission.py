"""The job admission of the call being handled, bound by the handler layer (:class:`gnomon.common.rpc.auth.AuthInterceptor`).

Each method's admission is declared beside its permission in the policy table
(:attr:`gnomon.common.auth.policy.Rule.admits`). For a method that declares a counting admission, the
interceptor binds ``admit(conn, n)`` (an :data:`gnomon.common.quotas.Admit` from the server's
:data:`Admitter`, on the API :meth:`gnomon.api.quotas.QuotaGuard.admitter`) to the namespace it
authorized, after authorization and before the handler runs; the handler hands
:func:`current_admit` to its engine, which calls it exactly once, with the count of the jobs it is
about to write, before it writes (inside its write transaction when it counts there). So a
servicer never names a quota, a method or a namespace for admission, and an admission cannot be
made twice, nor after the write: the only way to admit is the one bound here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gnomon.common.auth.policy import Rule
from gnomon.common.quotas import Admit

#: ``admitter(method, namespace)``: the admission of one call of ``method`` (``/package.Service/Method``)
#: in ``namespace``, as its rule declares (a server without job quotas has none).
Admitter = Callable[[str, str], Admit]

_CURRENT: ContextVar[Admit | None] = ContextVar("gnomon_admit", default=None)


def current_admit() -> Admit | None:
    """The admission bound to the unary call being handled (see the module docstring): None when the
    server enforces no job quotas, when the method declares no counting admission, or when a handler
    runs without the interceptor (in-process tests: nothing is admitted, as with no quotas)."""
    return _CURRENT.get()


@contextmanager
def bound(admitter: Admitter | None, method: str, rule: Rule | None, namespace: str | None) -> Iterator[None]:
    """Binds the admission of ``method`` in ``namespace`` (the one the caller was authorized in) for
    the code run inside, when ``rule`` declares a counting admission and ``admitter`` is set;
    otherwise binds None (so a handler never sees another call's admission)."""
    admit = None
    if admitter is not None and rule is not None and rule.admits is not None and rule.admits.counts:
        if namespace is None:  # a counting rule is NAMESPACE-scoped: authorization named it
            raise ValueError(f"{method}: an admitting method must act on one namespace")
        admit = admitter(method, namespace)
    token = _CURRENT.set(admit)
    try:
        yield
    finally:
        _CURRENT.reset(token)


__all__ = ["Admitter", "bound", "current_admit"]
