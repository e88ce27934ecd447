"""The namespace engine of the API: create, read, list, update and delete namespace rows, each one
transaction over :mod:`gnomon.common.storage.namespaces`; every change drops this process's cached
quotas of the namespace (:class:`gnomon.api.quotas.QuotaGuard`), other processes see it within their
cache time. Knows nothing of gRPC (:class:`gnomon.api.namespace_servicer.NamespaceServicer`
validates, converts and calls it).

Errors are the storage module's: NOT_FOUND (NAMESPACE_NOT_FOUND), ALREADY_EXISTS (NAMESPACE_EXISTS),
FAILED_PRECONDITION (STALE_VERSION, NAMESPACE_NOT_EMPTY).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.api.quotas import QuotaGuard
from gnomon.common.storage import namespaces as store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.namespaces import NamespaceRecord


class NamespaceEngine:
    """Namespace operations over ``engine``; ``quotas`` (None: none) is told of every change."""

    def __init__(self, engine: AsyncEngine, *, quotas: QuotaGuard | None = None):
        self.engine, self.quotas = engine, quotas

    def _changed(self, name: str) -> None:
        if self.quotas is not None:
            self.quotas.forget(name)

    async def create(self, rec: NamespaceRecord) -> NamespaceRecord:
        """Stores the new namespace ``rec``; returns it with version and instants."""
        out = await run_transaction(self.engine, lambda c: store.create_namespace(c, rec))
        self._changed(rec.name)
        return out

    async def get(self, name: str) -> NamespaceRecord:
        """The namespace ``name``."""
        return await run_transaction(self.engine, lambda c: store.get_namespace(c, name))

    async def list_namespaces(
        self, *, after: str | None, limit: int, only: Sequence[str] | None
    ) -> list[NamespaceRecord]:
        """At most ``limit`` namespaces after id ``after`` in id order (only ``only`` when given)."""
        return await run_transaction(
            self.engine, lambda c: store.list_namespaces(c, after=after, limit=limit, only=only)
        )

    async def update(
        self, name: str, etag: str, merge: Callable[[NamespaceRecord], NamespaceRecord]
    ) -> NamespaceRecord:
        """Reads namespace ``name``, applies ``merge(current)`` (which validates and raises
        INVALID_ARGUMENT) and writes the result when ``etag`` is empty or current; returns it."""

        async def tx(conn: AsyncConnection) -> NamespaceRecord:
            current = await store.get_namespace(conn, name)
            store.check_etag(current, etag)
            return await store.update_namespace(conn, merge(current), etag or current.etag)

        out = await run_transaction(self.engine, tx)
        self._changed(name)
        return out

    async def delete(self, name: str, etag: str) -> None:
        """Deletes namespace ``name``'s row and its grants in one transaction (refused while it has
        pending jobs or schedules)."""
        await run_transaction(self.engine, lambda c: store.delete_namespace(c, name, etag))
        self._changed(name)
