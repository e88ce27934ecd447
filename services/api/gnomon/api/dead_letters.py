"""The dead-letter engine of the API: list dead letters with their recent attempts, replay them, and
list the audit log, each over the storage modules (:mod:`gnomon.common.storage.dead_letters`,
:mod:`gnomon.common.storage.audit`), and the dispatcher hint after a replay. Knows nothing of gRPC
(:class:`gnomon.api.dead_letter_servicer.DeadLetterServicer` validates, converts and calls it).

Rows are ``jobs`` / ``attempts`` / ``audit_log`` rows as dicts; instants are UTC-aware datetimes; a
keyset cursor ``after`` is ``(instant, row id)``. Errors are the storage modules' (ALREADY_EXISTS for
a request id reused with another replay request).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.domain.dead_letters import DeadLetterFilter, ReplayOutcome, ReplayRequest
from gnomon.common.storage import audit
from gnomon.common.storage import dead_letters as dlq
from gnomon.common.storage.engine import run_transaction

Row = dict[str, Any]
Keyset = tuple[datetime, uuid.UUID]


class DeadLetterEngine:
    """Dead-letter operations over ``engine`` for a region with ``shards`` shards (replayed jobs get
    a shard); ``wake_dispatchers(due)`` (None: no hints) is called after a replay that created jobs."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shards: int,
        wake_dispatchers: Callable[[datetime], None] | None = None,
    ):
        self.engine, self.shards, self.wake_dispatchers = engine, shards, wake_dispatchers

    async def list_dead_letters(
        self, f: DeadLetterFilter, *, include_replayed: bool, limit: int, after: Keyset | None
    ) -> tuple[list[Row], dict[uuid.UUID, list[Row]]]:
        """Up to ``limit`` dead jobs matching ``f``, newest death first, strictly after ``after``
        (``(finished_at, id)``), and job id -> its recent attempts (oldest first) for the first
        ``limit - 1`` of them (the rows of a page read with ``limit = size + 1``); one transaction."""

        async def read(conn):
            rows = await dlq.list_dead_letters(
                conn, f, include_replayed=include_replayed, limit=limit, after=after
            )
            return rows, await dlq.recent_attempts(conn, [r["id"] for r in rows[: limit - 1]])

        return await run_transaction(self.engine, read)

    async def replay(self, req: ReplayRequest) -> ReplayOutcome:
        """Runs the replay ``req`` (:func:`gnomon.common.storage.dead_letters.replay_dead_letters`),
        then wakes the dispatchers when it created jobs (not for a dry run)."""
        out = await dlq.replay_dead_letters(self.engine, req, shards=self.shards)
        if self.wake_dispatchers is not None and out.replayed and not out.dry_run:
            self.wake_dispatchers(datetime.now(UTC))
        return out

    async def audit_entries(self, namespace: str, *, limit: int, after: Keyset | None) -> list[Row]:
        """Up to ``limit`` audit entries of ``namespace``, newest first, strictly after ``after``
        (``(created_at, id)``)."""
        return await run_transaction(
            self.engine, lambda c: audit.list_audit_entries(c, namespace, limit=limit, after=after)
        )
