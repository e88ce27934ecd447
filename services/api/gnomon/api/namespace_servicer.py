"""``gnomon.v1.NamespaceService``: a thin adapter. Each handler validates the request (every bad
field reported at once, before any write), makes one call into the namespace engine
(:class:`gnomon.api.namespaces.NamespaceEngine`) and converts the result
(proto/gnomon/v1/namespace_service.proto has each method's contract).

Limits: id per :data:`gnomon.common.names.NAMESPACE_RE`; description at most
:data:`MAX_DESCRIPTION` characters; retention 0 to :data:`MAX_RETENTION_S` seconds; quotas >= 0 with
``max_create_rate`` at most :data:`MAX_RATE` jobs/s and ``max_queues_per_hello`` at most
:data:`gnomon.dispatcher.hello.MAX_HELLO_QUEUES` (100). A worker-stream quota
(:data:`gnomon.common.quotas.STREAM_QUOTAS`) of 0 is stored NULL: the dispatcher's default
(``GNOMON_STREAM_QUOTA_*``); it is never "no limit".
"""

from __future__ import annotations

import math
from dataclasses import asdict
from datetime import timedelta

from gnomon._proto.gnomon.v1 import namespace_service_pb2 as pb
from gnomon._proto.gnomon.v1 import namespace_service_pb2_grpc
from gnomon.api.namespaces import NamespaceEngine
from gnomon.common import pagination
from gnomon.common.auth.principals import ALL, Permission, Principal
from gnomon.common.errors import InvalidArgument, PermissionDenied, Validator
from gnomon.common.names import (
    DEFAULT_NAMESPACE,
    NAMESPACE_RE,
    namespace_name,
    parse_namespace_name,
)
from gnomon.common.quotas import STREAM_QUOTAS, Quotas
from gnomon.common.rpc.auth import current_caller
from gnomon.common.storage.namespaces import NamespaceRecord
from gnomon.common.timeconv import check_duration, to_duration, to_timestamp

MAX_DESCRIPTION = 1024
MAX_RETENTION_S = 3650 * 86400
MAX_RATE = 1_000_000.0
MAX_COUNT = 1_000_000_000_000
MAX_INT32 = 2**31 - 1
MAX_QUEUES_PER_HELLO = 100
_QUOTA_FIELDS = (
    "max_create_rate",
    "max_pending_jobs",
    "max_schedules",
    "max_worker_streams",
    "max_queues_per_hello",
    "max_worker_streams_per_principal",
    "max_queues_per_principal",
    "max_streamed_queues",
)
#: UpdateNamespace mask paths.
MASK_PATHS = ("description", "retention", "quotas", *(f"quotas.{f}" for f in _QUOTA_FIELDS))


def namespace_to_proto(rec: NamespaceRecord) -> pb.Namespace:
    """A :class:`NamespaceRecord` -> ``gnomon.v1.Namespace``."""
    q = rec.quotas
    msg = pb.Namespace(
        name=namespace_name(rec.name),
        description=rec.description,
        retention=to_duration(timedelta(seconds=rec.retention_s)),
        quotas=pb.NamespaceQuotas(
            max_create_rate=q.max_create_rate,
            max_pending_jobs=q.max_pending_jobs,
            max_schedules=q.max_schedules,
            **{f: getattr(q, f) or 0 for f in STREAM_QUOTAS},  # None (the default) -> 0
        ),
        etag=rec.etag,
    )
    if rec.created_at is not None:
        msg.create_time.CopyFrom(to_timestamp(rec.created_at))
    if rec.updated_at is not None:
        msg.update_time.CopyFrom(to_timestamp(rec.updated_at))
    return msg


def _values(v: Validator, msg: pb.Namespace, prefix: str) -> tuple[str, int, Quotas]:
    """Validated ``(description, retention_s, quotas)`` of ``msg``; violations go to ``v`` with
    field paths under ``prefix`` (e.g. ``namespace.quotas.max_schedules``)."""
    v.check(
        len(msg.description) <= MAX_DESCRIPTION,
        f"{prefix}.description",
        f"at most {MAX_DESCRIPTION} characters",
    )
    retention = check_duration(
        v, msg.retention, f"{prefix}.retention", timedelta(0), timedelta(seconds=MAX_RETENTION_S)
    )
    q = msg.quotas
    rate = q.max_create_rate
    v.check(
        math.isfinite(rate) and 0 <= rate <= MAX_RATE,
        f"{prefix}.quotas.max_create_rate",
        f"must be between 0 and {MAX_RATE:g} jobs per second (0 = no limit)",
    )
    v.check(
        0 <= q.max_pending_jobs <= MAX_COUNT,
        f"{prefix}.quotas.max_pending_jobs",
        f"must be between 0 and {MAX_COUNT} (0 = no limit)",
    )
    v.check(q.max_schedules >= 0, f"{prefix}.quotas.max_schedules", "must not be negative (0 = no limit)")
    for f in STREAM_QUOTAS:
        v.check(getattr(q, f) >= 0, f"{prefix}.quotas.{f}", "must not be negative (0 = the default)")
    v.check(
        q.max_queues_per_hello <= MAX_QUEUES_PER_HELLO,
        f"{prefix}.quotas.max_queues_per_hello",
        f"must be between 0 and {MAX_QUEUES_PER_HELLO} (0 = the default)",
    )
    quotas = Quotas(
        max_create_rate=rate if math.isfinite(rate) else 0.0,
        max_pending_jobs=q.max_pending_jobs,
        max_schedules=q.max_schedules,
        **{f: getattr(q, f) or None for f in STREAM_QUOTAS},  # 0 -> None: the dispatcher's default
    )
    return msg.description, int(retention.total_seconds()) if retention is not None else 0, quotas


def visible_namespaces(principal: Principal) -> list[str] | None:
    """The namespace ids where ``principal`` holds ``namespace.read`` (GetNamespace would answer
    it; a worker-only grant does not count), sorted; None when it sees every namespace (a grant in
    ``*`` that gives ``namespace.read``, or an insecure server)."""
    if principal.can(Permission.NAMESPACE_READ, ALL):
        return None
    return sorted(
        {g.namespace for g in principal.grants if principal.can(Permission.NAMESPACE_READ, g.namespace)}
    )


def check_capacity_change(principal: Principal, name: str, paths: list[str]) -> None:
    """Raises :class:`PermissionDenied` (NAMESPACE_NOT_ALLOWED, metadata ``namespace`` and
    ``fields``) when ``paths`` (UpdateNamespace mask paths) change ``retention`` or ``quotas`` and
    ``principal`` lacks ``namespace.admin`` in ``*``: those are capacity decisions of the cluster; an
    admin of namespace ``name`` alone may change its description only."""
    capacity = sorted({p.split(".")[0] for p in paths if p != "description"})
    if capacity and not principal.can(Permission.NAMESPACE_ADMIN, ALL):
        raise PermissionDenied(
            f"changing {' and '.join(capacity)} of namespace {name!r} needs the admin role in '*'",
            metadata={"namespace": name, "fields": ",".join(capacity)},
        )


class NamespaceServicer(namespace_service_pb2_grpc.NamespaceServiceServicer):
    """``gnomon.v1.NamespaceService`` over ``namespaces`` (the engine every handler calls)."""

    def __init__(self, namespaces: NamespaceEngine):
        self.namespaces = namespaces

    async def CreateNamespace(self, request, context):
        """Creates namespace ``namespace_id`` with the request's description, retention and quotas.
        INVALID_ARGUMENT lists every bad field; ALREADY_EXISTS (NAMESPACE_EXISTS)."""
        v = Validator()
        v.check(
            bool(NAMESPACE_RE.fullmatch(request.namespace_id)),
            "namespace_id",
            "must be 1-63 characters of [a-z0-9-], not starting or ending with '-'",
        )
        description, retention_s, quotas = _values(v, request.namespace, "namespace")
        v.raise_if_any()
        rec = NamespaceRecord(request.namespace_id, description, retention_s, quotas)
        return pb.CreateNamespaceResponse(namespace=namespace_to_proto(await self.namespaces.create(rec)))

    async def GetNamespace(self, request, context):
        """The namespace ``name``. INVALID_ARGUMENT, NOT_FOUND (NAMESPACE_NOT_FOUND)."""
        name = parse_namespace_name(request.name)
        return pb.GetNamespaceResponse(namespace=namespace_to_proto(await self.namespaces.get(name)))

    async def ListNamespaces(self, request, context):
        """The namespaces where the caller holds ``namespace.read`` (all, with it in ``*``), by id, paged
        (``page_size`` 0-1000, 0 = 100). INVALID_ARGUMENT for a bad page size or token."""
        v = Validator()
        size = pagination.page_size(v, request.page_size)
        only = visible_namespaces(current_caller(context).principal)
        filt = pagination.fingerprint(only)
        cursor = pagination.decode_into(v, request.page_token, "ListNamespaces", filt)
        v.raise_if_any()
        after = pagination.text_of(cursor, "a", "ListNamespaces") if cursor is not None else None
        rows = await self.namespaces.list_namespaces(after=after, limit=size + 1, only=only)
        page, token = pagination.next_page(rows, size, "ListNamespaces", filt, lambda r: {"a": r.name})
        return pb.ListNamespacesResponse(
            namespaces=[namespace_to_proto(r) for r in page], next_page_token=token
        )

    async def UpdateNamespace(self, request, context):
        """Applies the fields ``update_mask`` names (empty: all) when ``namespace.etag`` is empty or
        current. INVALID_ARGUMENT (unknown paths, bad values), NOT_FOUND, FAILED_PRECONDITION;
        PERMISSION_DENIED (NAMESPACE_NOT_ALLOWED) when ``retention`` or ``quotas`` are named by a
        caller without the admin role in ``*`` (:func:`check_capacity_change`), before any write."""
        v = Validator()
        try:
            name = parse_namespace_name(request.namespace.name, "namespace.name")
        except InvalidArgument as e:  # reported with the other fields
            v.violations += e.violations
            name = ""
        paths = list(request.update_mask.paths) or ["description", "retention", "quotas"]
        bad = [p for p in paths if p not in MASK_PATHS]
        v.check(not bad, "update_mask", f"unknown paths {bad}; allowed: {list(MASK_PATHS)}")
        description, retention_s, quotas = _values(v, request.namespace, "namespace")
        v.raise_if_any()
        check_capacity_change(current_caller(context).principal, name, paths)

        def merge(cur: NamespaceRecord) -> NamespaceRecord:
            out = cur
            q = asdict(cur.quotas)
            for p in paths:
                if p == "description":
                    out = out.with_values(description=description)
                elif p == "retention":
                    out = out.with_values(retention_s=retention_s)
                elif p == "quotas":
                    q = asdict(quotas)
                else:
                    f = p.removeprefix("quotas.")
                    q[f] = getattr(quotas, f)
            return out.with_values(quotas=Quotas(**q))

        rec = await self.namespaces.update(name, request.namespace.etag, merge)
        return pb.UpdateNamespaceResponse(namespace=namespace_to_proto(rec))

    async def DeleteNamespace(self, request, context):
        """Deletes namespace ``name``'s row and every grant in it (``etag`` checked when set). INVALID_ARGUMENT (bad name,
        or ``default``), NOT_FOUND, FAILED_PRECONDITION (NAMESPACE_NOT_EMPTY, STALE_VERSION)."""
        v = Validator()
        name = parse_namespace_name(request.name)
        v.check(name != DEFAULT_NAMESPACE, "name", "the namespace 'default' cannot be deleted")
        v.raise_if_any()
        await self.namespaces.delete(name, request.etag)
        return pb.DeleteNamespaceResponse()
