"""The access engine of the API: principals, API keys and grants, each operation one transaction
over :mod:`gnomon.common.storage.tenancy`. Knows nothing of gRPC
(:class:`gnomon.api.access_servicer.AccessServicer` validates, converts and calls it).

A change reaches the servers' credential caches within ``GNOMON_AUTH_CACHE_S``. Errors are the storage
module's: NOT_FOUND (PRINCIPAL_NOT_FOUND, API_KEY_NOT_FOUND), ALREADY_EXISTS (PRINCIPAL_EXISTS).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common.auth import keys
from gnomon.common.auth.principals import Role
from gnomon.common.storage import tenancy as store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.tenancy import GrantRecord, KeyInfo, PrincipalRecord


class AccessEngine:
    """Principal, key and grant operations over ``engine``."""

    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    async def create_principal(self, name: str, description: str) -> PrincipalRecord:
        """Creates principal ``name``."""
        return await run_transaction(self.engine, lambda c: store.create_principal(c, name, description))

    async def get_principal(self, name: str) -> tuple[PrincipalRecord, list[GrantRecord]]:
        """Principal ``name`` and its grants, read in one transaction."""

        async def tx(conn: AsyncConnection) -> tuple[PrincipalRecord, list[GrantRecord]]:
            return await store.get_principal(conn, name), await store.grants_of(conn, name)

        return await run_transaction(self.engine, tx)

    async def list_principals(self, *, after: str | None, limit: int) -> list[PrincipalRecord]:
        """At most ``limit`` principals after ``after``, by name."""
        return await run_transaction(
            self.engine, lambda c: store.list_principals(c, after=after, limit=limit)
        )

    async def disable_principal(self, name: str) -> PrincipalRecord:
        """Disables principal ``name``."""
        return await run_transaction(self.engine, lambda c: store.disable_principal(c, name))

    async def create_key(
        self, principal: str, description: str, expires_at: datetime | None
    ) -> tuple[KeyInfo, str]:
        """A new random key for ``principal``: ``(stored key, token)``; the token is not kept anywhere."""
        key = keys.generate()
        info = await run_transaction(
            self.engine, lambda c: store.create_key(c, principal, key, description, expires_at)
        )
        return info, key.token

    async def list_keys(
        self, principal: str, *, after: tuple[datetime, str] | None, limit: int
    ) -> list[KeyInfo]:
        """At most ``limit`` keys of ``principal`` after keyset ``after``, oldest first."""
        return await run_transaction(
            self.engine, lambda c: store.list_keys(c, principal, after=after, limit=limit)
        )

    async def revoke_key(self, principal: str, key_id: str) -> KeyInfo:
        """Revokes key ``key_id`` of ``principal``."""
        return await run_transaction(self.engine, lambda c: store.revoke_key(c, principal, key_id))

    async def grant(
        self, principal: str, namespace: str, role: Role, queues: Sequence[str], *, must_exist: bool = True
    ) -> GrantRecord:
        """Grants ``role`` in ``namespace`` to ``principal``. ``must_exist``: raise NOT_FOUND
        (PRINCIPAL_NOT_FOUND) for an unknown principal; False stores the grant whether or not the
        principal exists (it takes effect if a principal of that id is created)."""
        if not must_exist:
            return await run_transaction(
                self.engine, lambda c: store.grant(c, principal, namespace, role, queues)
            )
        return await run_transaction(
            self.engine, lambda c: store.add_grant(c, principal, namespace, role, queues)
        )

    async def revoke(self, principal: str, namespace: str, role: Role) -> bool:
        """Removes the grant; True if it existed."""
        return await run_transaction(self.engine, lambda c: store.revoke_grant(c, principal, namespace, role))

    async def list_grants(
        self,
        *,
        namespace: str | None,
        principal: str | None,
        after: tuple[str, str, str] | None,
        limit: int,
    ) -> list[GrantRecord]:
        """At most ``limit`` grants (filters and order: :func:`gnomon.common.storage.tenancy.list_grants`)."""
        return await run_transaction(
            self.engine,
            lambda c: store.list_grants(
                c, namespace=namespace, principal=principal, after=after, limit=limit
            ),
        )
