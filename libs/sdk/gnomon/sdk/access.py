"""Namespaces (``gnomon.v1.NamespaceService``) and access (``gnomon.v1.AccessService``): namespace
settings and quotas, principals, their API keys and role grants, and who the caller is."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from google.protobuf import field_mask_pb2

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb

from .base import ClientBase, Span, paginate
from .convert import to_duration, to_timestamp
from .convert.access import (
    api_key_from_proto,
    grant_from_proto,
    namespace_from_proto,
    principal_from_proto,
    quotas_to_proto,
    role_value,
    whoami_from_proto,
)
from .models.access import ApiKey, CreatedApiKey, Grant, Namespace, NamespaceQuotas, Principal, WhoAmI

__all__ = ["AccessClient"]


def _ns_name(namespace: str) -> str:
    return namespace if namespace.startswith("namespaces/") else f"namespaces/{namespace}"


def _principal_name(principal: str) -> str:
    return principal if principal.startswith("principals/") else f"principals/{principal}"


class AccessClient(ClientBase):
    """The namespace and access methods of :class:`~gnomon.sdk.AsyncClient`. Namespaces and
    principals are named by id or full resource name (``namespaces/{id}``, ``principals/{id}``).
    Every method raises :class:`~gnomon.sdk.GnomonError` when the RPC fails (PERMISSION_DENIED
    without the admin role it needs, NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, ...)."""

    # -- namespaces

    async def create_namespace(
        self,
        namespace_id: str,
        *,
        description: str = "",
        retention: Span | None = None,
        quotas: NamespaceQuotas | None = None,
    ) -> Namespace:
        """Creates namespace ``namespace_id`` (``retention`` in seconds or a ``timedelta``; None:
        the cluster default) and returns it."""
        ns = npb.Namespace(description=description, quotas=quotas_to_proto(quotas or NamespaceQuotas()))
        if retention is not None:
            ns.retention.CopyFrom(to_duration(retention))
        req = npb.CreateNamespaceRequest(namespace_id=namespace_id, namespace=ns)
        return namespace_from_proto((await self._call(self._namespaces.CreateNamespace, req)).namespace)

    async def get_namespace(self, namespace: str) -> Namespace:
        """Reads a namespace."""
        req = npb.GetNamespaceRequest(name=_ns_name(namespace))
        return namespace_from_proto((await self._call(self._namespaces.GetNamespace, req)).namespace)

    async def list_namespaces_page(
        self, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[Namespace], str]:
        """One page of the namespaces the caller may read (a reader role or more there; all, with
        one in ``*``), by id:
        ``(namespaces, next_page_token)``."""
        req = npb.ListNamespacesRequest(page_size=page_size, page_token=page_token)
        resp = await self._call(self._namespaces.ListNamespaces, req)
        return [namespace_from_proto(n) for n in resp.namespaces], resp.next_page_token

    def list_namespaces(self, page_size: int = 100) -> AsyncIterator[Namespace]:
        """Every namespace :meth:`list_namespaces_page` lists, fetching pages lazily."""
        return paginate(lambda token: self.list_namespaces_page(page_size, token))

    async def update_namespace(
        self,
        namespace: str,
        *,
        description: str | None = None,
        retention: Span | None = None,
        quotas: dict[str, float | int] | None = None,
        etag: str = "",
    ) -> Namespace:
        """Changes only what is given: ``description``, ``retention``, and the quotas named in
        ``quotas`` (e.g. ``{"max_pending_jobs": 1000}``); ``etag`` (if set) must be current.

        Raises:
            ValueError: nothing to change, or an unknown quota name.
        """
        ns = npb.Namespace(name=_ns_name(namespace), etag=etag)
        paths: list[str] = []
        if description is not None:
            ns.description = description
            paths.append("description")
        if retention is not None:
            ns.retention.CopyFrom(to_duration(retention))
            paths.append("retention")
        for key, value in (quotas or {}).items():
            if key not in NamespaceQuotas.__dataclass_fields__:
                raise ValueError(
                    f"unknown quota {key!r}: one of {', '.join(NamespaceQuotas.__dataclass_fields__)}"
                )
            setattr(ns.quotas, key, value)
            paths.append(f"quotas.{key}")
        if not paths:
            raise ValueError("nothing to change")
        req = npb.UpdateNamespaceRequest(namespace=ns, update_mask=field_mask_pb2.FieldMask(paths=paths))
        return namespace_from_proto((await self._call(self._namespaces.UpdateNamespace, req)).namespace)

    async def delete_namespace(self, namespace: str, etag: str = "") -> None:
        """Deletes a namespace's row (refused with FAILED_PRECONDITION while it has pending jobs or
        schedules)."""
        await self._call(
            self._namespaces.DeleteNamespace, npb.DeleteNamespaceRequest(name=_ns_name(namespace), etag=etag)
        )

    # -- principals and keys

    async def create_principal(self, principal_id: str, description: str = "") -> Principal:
        """Creates a principal (no key, no role yet)."""
        req = apb.CreatePrincipalRequest(
            principal_id=principal_id, principal=apb.Principal(description=description)
        )
        return principal_from_proto((await self._call(self._access.CreatePrincipal, req)).principal)

    async def get_principal(self, principal: str) -> Principal:
        """Reads a principal with its grants."""
        req = apb.GetPrincipalRequest(name=_principal_name(principal))
        return principal_from_proto((await self._call(self._access.GetPrincipal, req)).principal)

    async def list_principals_page(
        self, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[Principal], str]:
        """One page of principals by id: ``(principals, next_page_token)``."""
        resp = await self._call(
            self._access.ListPrincipals, apb.ListPrincipalsRequest(page_size=page_size, page_token=page_token)
        )
        return [principal_from_proto(p) for p in resp.principals], resp.next_page_token

    def list_principals(self, page_size: int = 100) -> AsyncIterator[Principal]:
        """Every principal, fetching pages lazily."""
        return paginate(lambda token: self.list_principals_page(page_size, token))

    async def disable_principal(self, principal: str) -> Principal:
        """Disables a principal: every credential of it is refused from then on."""
        req = apb.DisablePrincipalRequest(name=_principal_name(principal))
        return principal_from_proto((await self._call(self._access.DisablePrincipal, req)).principal)

    async def create_api_key(
        self, principal: str, description: str = "", expire_time: datetime | None = None
    ) -> CreatedApiKey:
        """Creates an API key of ``principal``; the result's ``token`` is shown only this once.

        Raises:
            ValueError: a naive ``expire_time``.
        """
        req = apb.CreateApiKeyRequest(parent=_principal_name(principal), description=description)
        if expire_time is not None:
            req.expire_time.CopyFrom(to_timestamp(expire_time))
        resp = await self._call(self._access.CreateApiKey, req)
        return CreatedApiKey(api_key_from_proto(resp.api_key), resp.token)

    async def list_api_keys_page(
        self, principal: str, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[ApiKey], str]:
        """One page of ``principal``'s keys, oldest first: ``(keys, next_page_token)``."""
        req = apb.ListApiKeysRequest(
            parent=_principal_name(principal), page_size=page_size, page_token=page_token
        )
        resp = await self._call(self._access.ListApiKeys, req)
        return [api_key_from_proto(k) for k in resp.api_keys], resp.next_page_token

    def list_api_keys(self, principal: str, page_size: int = 100) -> AsyncIterator[ApiKey]:
        """Every key of ``principal``, fetching pages lazily."""
        return paginate(lambda token: self.list_api_keys_page(principal, page_size, token))

    async def revoke_api_key(self, principal: str, key_id: str) -> ApiKey:
        """Revokes key ``key_id`` (16 hex digits, or its full name) of ``principal``."""
        name = (
            key_id if key_id.startswith("principals/") else f"{_principal_name(principal)}/apiKeys/{key_id}"
        )
        return api_key_from_proto(
            (await self._call(self._access.RevokeApiKey, apb.RevokeApiKeyRequest(name=name))).api_key
        )

    # -- grants

    async def grant_role(
        self, principal: str, role: str, namespace: str, queues: Sequence[str] = ()
    ) -> Grant:
        """Grants ``role`` (admin, operator, client, worker, reader) in ``namespace`` (an id or
        ``"*"``) to ``principal``; ``queues`` only for the worker role (empty: every queue).

        Raises:
            ValueError: an unknown role.
        """
        req = apb.GrantRoleRequest(
            principal=_principal_name(principal),
            namespace=namespace.removeprefix("namespaces/"),
            role=role_value(role),  # type: ignore[arg-type]
            queues=list(queues),
        )
        return grant_from_proto((await self._call(self._access.GrantRole, req)).grant)

    async def revoke_role(self, principal: str, role: str, namespace: str) -> bool:
        """Removes ``principal``'s ``role`` in ``namespace``; True if it held it.

        Raises:
            ValueError: an unknown role.
        """
        req = apb.RevokeRoleRequest(
            principal=_principal_name(principal),
            namespace=namespace.removeprefix("namespaces/"),
            role=role_value(role),  # type: ignore[arg-type]
        )
        return bool((await self._call(self._access.RevokeRole, req)).removed)

    async def list_grants_page(
        self, namespace: str, principal: str | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[Grant], str]:
        """One page of the grants in ``namespace`` (``"*"``: all), optionally of one principal."""
        req = apb.ListGrantsRequest(
            namespace=namespace.removeprefix("namespaces/"),
            principal=_principal_name(principal) if principal else "",
            page_size=page_size,
            page_token=page_token,
        )
        resp = await self._call(self._access.ListGrants, req)
        return [grant_from_proto(g) for g in resp.grants], resp.next_page_token

    def list_grants(
        self, namespace: str, principal: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Grant]:
        """Every grant :meth:`list_grants_page` lists, fetching pages lazily."""
        return paginate(lambda token: self.list_grants_page(namespace, principal, page_size, token))

    async def whoami(self) -> WhoAmI:
        """The caller as the server sees it: principal, how it authenticated, its grants."""
        return whoami_from_proto(await self._call(self._access.WhoAmI, apb.WhoAmIRequest()))
