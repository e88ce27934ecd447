"""Namespace and access messages -> their models (:mod:`gnomon.sdk.models.access`), and roles back."""

from __future__ import annotations

from gnomon._proto.gnomon.v1 import access_service_pb2, namespace_service_pb2

from ..models.access import ApiKey, Grant, Namespace, NamespaceQuotas, Principal, WhoAmI
from .resources import enum_text
from .values import field_duration, field_time

ROLES = ("ADMIN", "OPERATOR", "CLIENT", "WORKER", "READER")


def role_value(role: str) -> int:
    """``"client"``/``"CLIENT"``/``"ROLE_CLIENT"`` -> the ``gnomon.v1.Role`` number.

    Raises:
        ValueError: not one of admin, operator, client, worker, reader.
    """
    short = role.upper().removeprefix("ROLE_")
    if short not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(r.lower() for r in ROLES)}")
    return access_service_pb2.Role.Value("ROLE_" + short)


def quotas_to_proto(q: NamespaceQuotas) -> namespace_service_pb2.NamespaceQuotas:
    """:class:`NamespaceQuotas` -> ``gnomon.v1.NamespaceQuotas``."""
    return namespace_service_pb2.NamespaceQuotas(
        max_create_rate=q.max_create_rate,
        max_pending_jobs=q.max_pending_jobs,
        max_schedules=q.max_schedules,
        max_worker_streams=q.max_worker_streams,
        max_queues_per_hello=q.max_queues_per_hello,
        max_worker_streams_per_principal=q.max_worker_streams_per_principal,
        max_queues_per_principal=q.max_queues_per_principal,
        max_streamed_queues=q.max_streamed_queues,
    )


def namespace_from_proto(msg: namespace_service_pb2.Namespace) -> Namespace:
    """``gnomon.v1.Namespace`` -> :class:`Namespace`."""
    q = msg.quotas
    return Namespace(
        name=msg.name,
        description=msg.description,
        retention=field_duration(msg, "retention"),
        quotas=NamespaceQuotas(
            q.max_create_rate,
            q.max_pending_jobs,
            q.max_schedules,
            q.max_worker_streams,
            q.max_queues_per_hello,
            q.max_worker_streams_per_principal,
            q.max_queues_per_principal,
            q.max_streamed_queues,
        ),
        create_time=field_time(msg, "create_time"),
        update_time=field_time(msg, "update_time"),
        etag=msg.etag,
    )


def grant_from_proto(msg: access_service_pb2.Grant) -> Grant:
    """``gnomon.v1.Grant`` -> :class:`Grant` (role as a short name)."""
    return Grant(
        principal=msg.principal,
        namespace=msg.namespace,
        role=enum_text(access_service_pb2.Role, "ROLE_", msg.role),
        queues=tuple(msg.queues),
        create_time=field_time(msg, "create_time"),
    )


def principal_from_proto(msg: access_service_pb2.Principal) -> Principal:
    """``gnomon.v1.Principal`` -> :class:`Principal`."""
    return Principal(
        name=msg.name,
        description=msg.description,
        create_time=field_time(msg, "create_time"),
        disable_time=field_time(msg, "disable_time"),
        grants=tuple(grant_from_proto(g) for g in msg.grants),
    )


def api_key_from_proto(msg: access_service_pb2.ApiKey) -> ApiKey:
    """``gnomon.v1.ApiKey`` -> :class:`ApiKey`."""
    return ApiKey(
        name=msg.name,
        id=msg.id,
        description=msg.description,
        create_time=field_time(msg, "create_time"),
        expire_time=field_time(msg, "expire_time"),
        revoke_time=field_time(msg, "revoke_time"),
    )


def whoami_from_proto(msg: access_service_pb2.WhoAmIResponse) -> WhoAmI:
    """``gnomon.v1.WhoAmIResponse`` -> :class:`WhoAmI`."""
    return WhoAmI(
        principal=msg.principal,
        kind=enum_text(access_service_pb2.PrincipalKind, "PRINCIPAL_KIND_", msg.kind),
        grants=tuple(grant_from_proto(g) for g in msg.grants),
    )
