"""Per-principal turns for the List calls that carry payloads (ListJobs, ListDeadLetters): at most
``per_principal`` of one principal's such calls run at once on one API process; up to
:data:`MAX_WAITING` more wait, in arrival order, for up to ``wait_s`` seconds and are then refused
UNAVAILABLE (LISTINGS_BUSY); a call beyond those is refused at once, the same way.

Why: each such call reads and serializes up to the reply budget (``GNOMON_REPLY_BUDGET_BYTES``, 4 MiB
by default) of payloads. The byte budget bounds one call; this gate bounds how many one principal
runs at once, so one tenant's concurrent listings cost the process at most ``per_principal`` x the
budget of memory and a bounded share of its event loop, and other tenants' calls are served between
them (docs/security.md, "Limits and quotas"). A waiting call holds no rows and no connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import Unavailable

#: Most calls of one principal waiting for a turn on one API process; one more is refused at once
#: (a caller cannot park an unbounded number of calls, each holding its request and a task).
MAX_WAITING = 8


class ListGate:
    """The turns of each principal (see the module docstring): ``per_principal`` calls at once,
    ``wait_s`` seconds of waiting at most. Entries exist only while a principal has calls running
    or waiting, so the table is bounded by the calls in flight. One event loop owns it."""

    def __init__(self, per_principal: int = 1, wait_s: float = 30.0) -> None:
        self.per_principal, self.wait_s = per_principal, wait_s
        # principal -> (its turns, [calls running or waiting, calls running])
        self._turns: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    def running(self, principal: str) -> int:
        """How many calls of ``principal`` hold a turn now (for tests and metrics)."""
        entry = self._turns.get(principal)
        return 0 if entry is None else entry[1][1]

    @asynccontextmanager
    async def turn(self, principal: str) -> AsyncIterator[None]:
        """Holds one of ``principal``'s turns for the block; waits up to ``wait_s`` seconds for it.
        Raises :class:`Unavailable` (LISTINGS_BUSY) when none came in time, or at once when
        :data:`MAX_WAITING` calls of ``principal`` already wait."""
        entry = self._turns.get(principal)
        if entry is None:
            entry = self._turns[principal] = (asyncio.Semaphore(self.per_principal), [0, 0])
        sem, users = entry
        if users[0] - users[1] >= MAX_WAITING:
            raise Unavailable(
                f"{MAX_WAITING} listings of this caller already wait on this server; retry later",
                reason=ErrorReason.LISTINGS_BUSY,
            )
        users[0] += 1
        try:
            try:
                await asyncio.wait_for(sem.acquire(), self.wait_s)
            except TimeoutError:
                raise Unavailable(
                    f"{self.per_principal} listings of this caller are already running on this server "
                    f"and none ended within {self.wait_s:g} s; retry later",
                    reason=ErrorReason.LISTINGS_BUSY,
                ) from None
            users[1] += 1
            try:
                yield
            finally:
                users[1] -= 1
                sem.release()
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._turns.pop(principal, None)
