"""Principals, roles, permissions and grants: the access model of docs/security.md.

A :class:`Principal` is an authenticated caller. It holds :class:`Grant` s: a :class:`Role` in a
namespace (``*``: every namespace); a worker grant also names the queues it may lease from. Each role
is a fixed set of :class:`Permission` s (:data:`ROLE_PERMISSIONS`), so a check is a set lookup.
The shape follows Temporal's authorizer (a claim mapper turns credentials into per-namespace roles;
one authorizer decides per call), with Cloud Tasks-style per-queue grants for workers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

#: The namespace of a grant that applies to every namespace (and to cluster-wide methods).
ALL = "*"

#: The actor (principal name) of a JWT caller is this prefix and its principal claim: ``jwt:alice``.
JWT_ACTOR_PREFIX = "jwt:"
#: Principal names no database principal may take, because an authenticated caller of another kind
#: bears them: the service token's and insecure mode's actors (:mod:`gnomon.common.auth.authenticator`).
RESERVED_PRINCIPAL_NAMES = frozenset({"service", "insecure"})
#: The separator of actor prefixes (``jwt:``). A database principal's id never contains it, so no
#: principal created through the API can be named like a JWT actor, or like the actor of any kind
#: of credential added later (client-certificate principals are database principals named by the
#: certificate's CN, without a prefix).
ACTOR_PREFIX_SEPARATOR = ":"


def reserved_principal_id(principal_id: str) -> str | None:
    """Why ``principal_id`` may not name a new database principal (None: it may): it contains
    :data:`ACTOR_PREFIX_SEPARATOR` (reserved for actor prefixes such as ``jwt:``) or is one of
    :data:`RESERVED_PRINCIPAL_NAMES`."""
    if ACTOR_PREFIX_SEPARATOR in principal_id:
        return f"must not contain {ACTOR_PREFIX_SEPARATOR!r}: it is reserved for actor prefixes such as {JWT_ACTOR_PREFIX!r}"
    if principal_id in RESERVED_PRINCIPAL_NAMES:
        return f"{principal_id!r} is reserved (the actor of the service token or of insecure mode)"
    return None


class Role(StrEnum):
    """A role in a namespace (see docs/security.md for what each may do)."""

    ADMIN = "admin"
    OPERATOR = "operator"
    CLIENT = "client"
    WORKER = "worker"
    READER = "reader"


class Permission(StrEnum):
    """One thing a call may require. Methods map to permissions in :mod:`gnomon.common.auth.policy`."""

    JOBS_READ = "jobs.read"
    JOBS_WRITE = "jobs.write"
    SCHEDULES_READ = "schedules.read"
    SCHEDULES_WRITE = "schedules.write"
    SCHEDULES_OPERATE = "schedules.operate"
    QUEUES_READ = "queues.read"
    QUEUES_WRITE = "queues.write"
    DEAD_LETTERS_READ = "dead_letters.read"
    DEAD_LETTERS_REPLAY = "dead_letters.replay"
    AUDIT_READ = "audit.read"
    NAMESPACE_READ = "namespace.read"
    NAMESPACE_ADMIN = "namespace.admin"
    LEASE = "lease"
    #: service-to-service calls (hints); held only by the service identity
    SERVICE = "service"


_READ = frozenset(
    {
        Permission.JOBS_READ,
        Permission.SCHEDULES_READ,
        Permission.QUEUES_READ,
        Permission.DEAD_LETTERS_READ,
        Permission.NAMESPACE_READ,
    }
)
_CLIENT = _READ | {Permission.JOBS_WRITE, Permission.SCHEDULES_WRITE}
_OPERATOR = _CLIENT | {Permission.SCHEDULES_OPERATE, Permission.QUEUES_WRITE, Permission.DEAD_LETTERS_REPLAY}
_ADMIN = _OPERATOR | {Permission.AUDIT_READ, Permission.NAMESPACE_ADMIN}

#: What each role may do in the namespace it is granted in.
ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.READER: _READ,
    Role.CLIENT: frozenset(_CLIENT),
    Role.OPERATOR: frozenset(_OPERATOR),
    Role.ADMIN: frozenset(_ADMIN),
    Role.WORKER: frozenset({Permission.LEASE}),
}


class PrincipalKind(StrEnum):
    """How a principal authenticated."""

    API_KEY = "api-key"
    JWT = "jwt"
    CERTIFICATE = "certificate"
    SERVICE = "service"
    #: a server running with GNOMON_INSECURE=true: no authentication, every caller may do everything
    INSECURE = "insecure"


@dataclass(frozen=True)
class Grant:
    """``role`` in ``namespace`` (a namespace id or :data:`ALL`); ``queues`` (worker role only) the
    queues it may lease from, ``("*",)`` for all."""

    namespace: str
    role: Role
    queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: ``name`` (unique; the audit log's actor), ``kind`` (how it
    authenticated), ``grants``. ``service``: the service identity (hints; every namespace)."""

    name: str
    kind: PrincipalKind
    grants: tuple[Grant, ...] = ()
    service: bool = False
    _perms: dict[str, frozenset[Permission]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        perms: dict[str, set[Permission]] = {}
        for g in self.grants:
            perms.setdefault(g.namespace, set()).update(ROLE_PERMISSIONS[g.role])
        if self.service or self.kind is PrincipalKind.INSECURE:
            perms.setdefault(ALL, set()).add(Permission.SERVICE)
        if self.kind is PrincipalKind.INSECURE:
            perms[ALL].update(p for ps in ROLE_PERMISSIONS.values() for p in ps)
        self._perms.update({ns: frozenset(ps) for ns, ps in perms.items()})

    def can(self, permission: Permission, namespace: str) -> bool:
        """True if a grant in ``namespace`` or in :data:`ALL` gives ``permission``. For a
        cluster-wide check pass :data:`ALL` (only ``*`` grants count)."""
        if permission in self._perms.get(ALL, ()):
            return True
        return namespace != ALL and permission in self._perms.get(namespace, ())

    def has_any_grant(self) -> bool:
        """True if the principal holds any role anywhere (or is the service / insecure identity)."""
        return bool(self._perms)

    def worker_queues(self, namespace: str) -> frozenset[str] | None:
        """The queues this principal may lease from in ``namespace``: None if it may not lease
        there; a set containing ``"*"`` for every queue."""
        if self.kind is PrincipalKind.INSECURE:
            return frozenset({ALL})
        found: set[str] | None = None
        for g in self.grants:
            if g.role is Role.WORKER and g.namespace in (namespace, ALL):
                found = (found or set()) | set(g.queues or (ALL,))
        return frozenset(found) if found is not None else None

    def worker_namespaces(self) -> list[str]:
        """Namespaces (ids, not ``*``) where this principal holds the worker role, sorted."""
        return sorted({g.namespace for g in self.grants if g.role is Role.WORKER and g.namespace != ALL})


def grants_from(rows: Iterable[tuple[str, str, Iterable[str]]]) -> tuple[Grant, ...]:
    """Grants from ``(namespace, role, queues)`` rows; rows with an unknown role are skipped (a newer
    server may have written them). Sorted, so equal grant sets compare equal."""
    out = []
    for ns, role, queues in rows:
        try:
            out.append(Grant(ns, Role(role), tuple(sorted(queues))))
        except ValueError:
            continue
    return tuple(sorted(out, key=lambda g: (g.namespace, g.role.value)))
