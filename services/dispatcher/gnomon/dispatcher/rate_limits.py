"""Per-queue dispatch rate limits as the claim loop applies them (docs/operations.md#backpressure).

Whether a target (namespace, queue) has a limit is looked up by the targets of a claim round, never
by reading the table: one statement of primary-key lookups for the round's targets whose answer is
older than ``refresh_s`` (read inside the claim transaction), so however many limits other
namespaces set, a queue's own limit is found. The tokens themselves are always taken from the
database rows inside the claim transaction (:mod:`gnomon.common.storage.rate_limits`), so all
dispatchers share one bucket; a round takes and gives back the tokens of all its limited targets in
one statement each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage import rate_limits as store

Target = tuple[str, str]

#: Entries of the limited-or-not cache kept beyond the current round's targets before it is pruned.
CACHE_SLACK = 10_000


class RateLimits:
    """The limited (namespace, queue) targets of ``region`` and the token operations on them.
    ``clock`` (monotonic seconds) is injectable for tests."""

    def __init__(self, *, region: str, refresh_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.region, self.refresh_s, self.clock = region, refresh_s, clock
        self._known: dict[Target, tuple[float, bool]] = {}  # target -> (checked at, limited)

    async def refresh(self, conn: AsyncConnection, targets: Sequence[Target]) -> None:
        """Looks up, in one statement, which of ``targets`` have a limit, for those whose answer is
        older than ``refresh_s`` seconds (a new or removed limit applies within that time)."""
        now = self.clock()
        stale = [t for t in targets if (k := self._known.get(t)) is None or now - k[0] >= self.refresh_s]
        if not stale:
            return
        found = await store.limited(conn, region=self.region, targets=stale)
        if len(self._known) > len(targets) + CACHE_SLACK:  # targets no stream serves any more
            keep = set(targets)
            self._known = {t: k for t, k in self._known.items() if t in keep}
        for t in stale:
            self._known[t] = (now, t in found)

    def limited(self, target: Target) -> bool:
        """True if ``target`` (namespace, queue) had a limit at its last lookup."""
        k = self._known.get(target)
        return k is not None and k[1]

    async def take(self, conn: AsyncConnection, wants: dict[Target, int]) -> dict[Target, tuple[int, float]]:
        """Up to ``wants[t]`` tokens of each target, in one round trip pair: target -> ``(granted,
        seconds until the next token if none)``; a target without a limit gets what it wants."""
        return await store.take_many(conn, region=self.region, wants=wants)

    async def give_back(self, conn: AsyncConnection, backs: dict[Target, int]) -> None:
        """Returns tokens taken in this transaction but not used (target -> count)."""
        await store.give_back_many(conn, region=self.region, backs=backs)
