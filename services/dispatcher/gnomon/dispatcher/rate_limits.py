"""Per-queue dispatch rate limits as the claim loop applies them (docs/operations.md#backpressure).

Which queues have a limit is cached for ``refresh_s`` seconds (read inside a claim transaction, at
most once per period); the tokens themselves are always taken from the database row inside the
claim transaction (:mod:`gnomon.common.storage.rate_limits`), so all dispatchers share one bucket.
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage import rate_limits as store


class RateLimits:
    """The limited (namespace, queue) targets of ``region`` and the token operations on them."""

    def __init__(self, *, region: str, refresh_s: float = 1.0):
        self.region, self.refresh_s = region, refresh_s
        self._targets: set[tuple[str, str]] = set()
        self._fetched = float("-inf")

    async def refresh(self, conn: AsyncConnection) -> None:
        """Re-reads the limited targets when the cache is older than ``refresh_s`` (monotonic clock)."""
        if time.monotonic() - self._fetched >= self.refresh_s:
            self._targets = await store.limited(conn, region=self.region)
            self._fetched = time.monotonic()

    def limited(self, target: tuple[str, str]) -> bool:
        """True if ``target`` (namespace, queue) had a limit at the last refresh."""
        return target in self._targets

    async def take(self, conn: AsyncConnection, target: tuple[str, str], want: int) -> tuple[int, float]:
        """Up to ``want`` tokens of ``target``: ``(granted, seconds until the next token if none)``."""
        return await store.take(conn, region=self.region, namespace=target[0], queue=target[1], want=want)

    async def give_back(self, conn: AsyncConnection, target: tuple[str, str], n: int) -> None:
        """Returns ``n`` tokens taken in this transaction but not used."""
        await store.give_back(conn, region=self.region, namespace=target[0], queue=target[1], n=n)
