"""``gnomon.v1.AccessService``: a thin adapter. Each handler validates the request (every bad field
reported at once, before any write), makes one call into the access engine
(:class:`gnomon.api.access.AccessEngine`) and converts the result
(proto/gnomon/v1/access_service.proto has each method's contract). Who may call what is decided
before the handler by :class:`gnomon.common.rpc.auth.AuthInterceptor`; WhoAmI reads the caller
it admitted (:func:`gnomon.common.rpc.auth.current_caller`).

Limits: principal ids per :data:`gnomon.common.names.PRINCIPAL_ID_RE`, without ``:`` and not
``service``/``insecure`` (reserved for other callers' actors); descriptions at most
:data:`MAX_DESCRIPTION` characters; worker grants name 1-:data:`MAX_GRANT_QUEUES` queues (or ``*``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from gnomon._proto.gnomon.v1 import access_service_pb2 as pb
from gnomon._proto.gnomon.v1 import access_service_pb2_grpc
from gnomon.api.access import AccessEngine
from gnomon.common import pagination
from gnomon.common.auth.principals import (
    ALL,
    Grant,
    Permission,
    PrincipalKind,
    Role,
    reserved_principal_id,
)
from gnomon.common.errors import InvalidArgument, Validator
from gnomon.common.names import (
    NAMESPACE_RE,
    PRINCIPAL_ID_RE,
    QUEUE_RE,
    api_key_name,
    parse_api_key_name,
    parse_principal_name,
    principal_name,
)
from gnomon.common.rpc.auth import current_caller
from gnomon.common.storage.tenancy import GrantRecord, KeyInfo, PrincipalRecord
from gnomon.common.timeconv import from_timestamp, to_timestamp

MAX_DESCRIPTION = 1024
MAX_GRANT_QUEUES = 100


def role_of(value: int) -> Role | None:
    """``gnomon.v1.Role`` number -> :class:`Role` (None for UNSPECIFIED or unknown)."""
    if value == pb.ROLE_UNSPECIFIED or value not in pb.Role.values():
        return None
    return Role[pb.Role.Name(value).removeprefix("ROLE_")]


def role_to_proto(role: str) -> str:
    """A stored role (:class:`Role` value) -> the ``gnomon.v1.Role`` value name (UNSPECIFIED if unknown)."""
    try:
        return "ROLE_" + Role(role).name
    except ValueError:
        return "ROLE_UNSPECIFIED"


def principal_to_proto(rec: PrincipalRecord, grants: list[GrantRecord] | None = None) -> pb.Principal:
    """A :class:`PrincipalRecord` (and its grants) -> ``gnomon.v1.Principal``."""
    msg = pb.Principal(
        name=principal_name(rec.name),
        description=rec.description,
        create_time=to_timestamp(rec.created_at),
        grants=[grant_to_proto(g) for g in grants or ()],
    )
    if rec.disabled_at is not None:
        msg.disable_time.CopyFrom(to_timestamp(rec.disabled_at))
    return msg


def key_to_proto(k: KeyInfo) -> pb.ApiKey:
    """A :class:`KeyInfo` -> ``gnomon.v1.ApiKey`` (never a secret)."""
    msg = pb.ApiKey(
        name=api_key_name(k.principal, k.id),
        id=k.id,
        description=k.description,
        create_time=to_timestamp(k.created_at),
    )
    if k.expires_at is not None:
        msg.expire_time.CopyFrom(to_timestamp(k.expires_at))
    if k.revoked_at is not None:
        msg.revoke_time.CopyFrom(to_timestamp(k.revoked_at))
    return msg


def grant_to_proto(g: GrantRecord) -> pb.Grant:
    """A :class:`GrantRecord` -> ``gnomon.v1.Grant``."""
    return pb.Grant(
        principal=principal_name(g.principal),
        namespace=g.namespace,
        role=role_to_proto(g.role),
        queues=list(g.queues),
        create_time=to_timestamp(g.created_at),
    )


def _principal(v: Validator, name: str, field: str) -> str:
    try:
        return parse_principal_name(name, field)
    except InvalidArgument as e:
        v.violations += e.violations
        return ""


def _namespace(v: Validator, ns: str, field: str = "namespace") -> str:
    v.check(
        ns == ALL or bool(NAMESPACE_RE.fullmatch(ns)),
        field,
        "must be a namespace id ([a-z0-9-]{1,63}, no leading or trailing '-') or '*'",
    )
    return ns


def _role(v: Validator, value: int) -> Role:
    role = role_of(value)
    v.check(
        role is not None,
        "role",
        "must be one of ROLE_ADMIN, ROLE_OPERATOR, ROLE_CLIENT, ROLE_WORKER, ROLE_READER",
    )
    return role or Role.READER


class AccessServicer(access_service_pb2_grpc.AccessServiceServicer):
    """``gnomon.v1.AccessService`` over ``access`` (the engine every handler calls)."""

    def __init__(self, access: AccessEngine):
        self.access = access

    async def CreatePrincipal(self, request, context):
        """Creates principal ``principal_id``. INVALID_ARGUMENT (malformed id, or one reserved for other
        kinds of callers: :func:`gnomon.common.auth.principals.reserved_principal_id`), ALREADY_EXISTS
        (PRINCIPAL_EXISTS)."""
        v = Validator()
        v.check(
            bool(PRINCIPAL_ID_RE.fullmatch(request.principal_id)),
            "principal_id",
            "must be 1-128 printable ASCII characters without '/' or spaces",
        )
        reserved = reserved_principal_id(request.principal_id)
        v.check(reserved is None, "principal_id", reserved or "")
        desc = request.principal.description
        v.check(
            len(desc) <= MAX_DESCRIPTION, "principal.description", f"at most {MAX_DESCRIPTION} characters"
        )
        v.raise_if_any()
        rec = await self.access.create_principal(request.principal_id, desc)
        return pb.CreatePrincipalResponse(principal=principal_to_proto(rec, []))

    async def GetPrincipal(self, request, context):
        """Principal ``name`` with its grants. INVALID_ARGUMENT, NOT_FOUND (PRINCIPAL_NOT_FOUND)."""
        rec, grants = await self.access.get_principal(parse_principal_name(request.name))
        return pb.GetPrincipalResponse(principal=principal_to_proto(rec, grants))

    async def ListPrincipals(self, request, context):
        """Principals by id, paged (``page_size`` 0-1000, 0 = 100). INVALID_ARGUMENT."""
        v = Validator()
        size = pagination.page_size(v, request.page_size)
        cursor = pagination.decode_into(v, request.page_token, "ListPrincipals", "")
        v.raise_if_any()
        after = pagination.text_of(cursor, "a", "ListPrincipals", 128) if cursor is not None else None
        rows = await self.access.list_principals(after=after, limit=size + 1)
        page, token = pagination.next_page(rows, size, "ListPrincipals", "", lambda r: {"a": r.name})
        return pb.ListPrincipalsResponse(
            principals=[principal_to_proto(r) for r in page], next_page_token=token
        )

    async def DisablePrincipal(self, request, context):
        """Disables principal ``name`` (idempotent). INVALID_ARGUMENT, NOT_FOUND (PRINCIPAL_NOT_FOUND)."""
        rec = await self.access.disable_principal(parse_principal_name(request.name))
        return pb.DisablePrincipalResponse(principal=principal_to_proto(rec))

    async def CreateApiKey(self, request, context):
        """A new key of principal ``parent``; the response holds its token, shown only here.
        INVALID_ARGUMENT (bad parent, long description, expire time not in the future), NOT_FOUND."""
        v = Validator()
        principal = _principal(v, request.parent, "parent")
        v.check(
            len(request.description) <= MAX_DESCRIPTION,
            "description",
            f"at most {MAX_DESCRIPTION} characters",
        )
        expires = None
        if request.HasField("expire_time"):
            try:
                expires = from_timestamp(request.expire_time)
            except (ValueError, OverflowError):
                expires = None
            v.check(
                expires is not None and expires > datetime.now(UTC),
                "expire_time",
                "must be a valid instant in the future",
            )
        v.raise_if_any()
        info, token = await self.access.create_key(principal, request.description, expires)
        return pb.CreateApiKeyResponse(api_key=key_to_proto(info), token=token)

    async def ListApiKeys(self, request, context):
        """Keys of principal ``parent``, oldest first, paged. INVALID_ARGUMENT, NOT_FOUND."""
        v = Validator()
        principal = _principal(v, request.parent, "parent")
        size = pagination.page_size(v, request.page_size)
        filt = pagination.fingerprint(principal)
        cursor = pagination.decode_into(v, request.page_token, "ListApiKeys", filt)
        v.raise_if_any()
        after = None
        if cursor is not None:
            after = (
                pagination.instant_of(cursor, "t", "ListApiKeys"),
                pagination.text_of(cursor, "k", "ListApiKeys"),
            )
        rows = await self.access.list_keys(principal, after=after, limit=size + 1)
        page, token = pagination.next_page(
            rows, size, "ListApiKeys", filt, lambda k: {"t": k.created_at.isoformat(), "k": k.id}
        )
        return pb.ListApiKeysResponse(api_keys=[key_to_proto(k) for k in page], next_page_token=token)

    async def RevokeApiKey(self, request, context):
        """Revokes key ``name`` (idempotent). INVALID_ARGUMENT, NOT_FOUND (API_KEY_NOT_FOUND)."""
        principal, key_id = parse_api_key_name(request.name)
        return pb.RevokeApiKeyResponse(api_key=key_to_proto(await self.access.revoke_key(principal, key_id)))

    async def GrantRole(self, request, context):
        """Grants ``role`` in ``namespace`` to ``principal``. INVALID_ARGUMENT (bad principal,
        namespace, role or queues; queues on a non-worker role); NOT_FOUND (PRINCIPAL_NOT_FOUND) only
        for a caller with the admin role in ``*`` (who may list principals anyway). An admin of the
        namespace alone gets the same answer whether or not the principal exists: the grant is
        stored either way (so GrantRole is no oracle of the cluster's principals; a grant to an id
        nobody holds does nothing until a principal of that id is created, and gives it no more than
        that namespace, which the admin could give it then)."""
        v = Validator()
        principal = _principal(v, request.principal, "principal")
        ns = _namespace(v, request.namespace)
        role = _role(v, request.role)
        queues = list(dict.fromkeys(request.queues))
        if role is not Role.WORKER:
            v.check(not queues, "queues", "only the worker role names queues")
        elif len(queues) > MAX_GRANT_QUEUES:
            v.add("queues", f"at most {MAX_GRANT_QUEUES} queues")
        else:
            for i, q in enumerate(queues):
                v.check(
                    q == ALL or bool(QUEUE_RE.fullmatch(q)),
                    f"queues[{i}]",
                    "must match [a-z0-9][a-z0-9._-]{0,63} or be '*'",
                )
        v.raise_if_any()
        if role is Role.WORKER and (not queues or ALL in queues):
            queues = [ALL]
        cluster_admin = current_caller(context).principal.can(Permission.NAMESPACE_ADMIN, ALL)
        rec = await self.access.grant(principal, ns, role, queues, must_exist=cluster_admin)
        return pb.GrantRoleResponse(grant=grant_to_proto(rec))

    async def RevokeRole(self, request, context):
        """Removes ``principal``'s ``role`` in ``namespace``; ``removed`` says whether it was held.
        INVALID_ARGUMENT for a bad field."""
        v = Validator()
        principal = _principal(v, request.principal, "principal")
        ns = _namespace(v, request.namespace)
        role = _role(v, request.role)
        v.raise_if_any()
        return pb.RevokeRoleResponse(removed=await self.access.revoke(principal, ns, role))

    async def ListGrants(self, request, context):
        """Grants in ``namespace`` (``*``: all), optionally of one ``principal``, paged.
        INVALID_ARGUMENT for a bad field or token."""
        v = Validator()
        ns = _namespace(v, request.namespace)
        principal = _principal(v, request.principal, "principal") if request.principal else None
        size = pagination.page_size(v, request.page_size)
        filt = pagination.fingerprint(ns, principal)
        cursor = pagination.decode_into(v, request.page_token, "ListGrants", filt)
        v.raise_if_any()
        after = None
        if cursor is not None:
            after = (
                pagination.text_of(cursor, "p", "ListGrants", 128),
                pagination.text_of(cursor, "n", "ListGrants"),
                pagination.text_of(cursor, "r", "ListGrants"),
            )
        rows = await self.access.list_grants(
            namespace=None if ns == ALL else ns, principal=principal, after=after, limit=size + 1
        )
        page, token = pagination.next_page(
            rows, size, "ListGrants", filt, lambda g: {"p": g.principal, "n": g.namespace, "r": g.role}
        )
        return pb.ListGrantsResponse(grants=[grant_to_proto(g) for g in page], next_page_token=token)

    async def WhoAmI(self, request, context):
        """The caller: principal name, how it authenticated and its grants."""
        p = current_caller(context).principal
        return pb.WhoAmIResponse(
            principal=principal_name(p.name),
            kind=_KINDS.get(p.kind, "PRINCIPAL_KIND_UNSPECIFIED"),
            grants=[_grant(p.name, g) for g in p.grants],
        )


def _grant(principal: str, g: Grant) -> pb.Grant:
    return pb.Grant(
        principal=principal_name(principal),
        namespace=g.namespace,
        role="ROLE_" + g.role.name,
        queues=list(g.queues),
    )


_KINDS: dict[PrincipalKind, str] = {k: "PRINCIPAL_KIND_" + k.name for k in PrincipalKind}
