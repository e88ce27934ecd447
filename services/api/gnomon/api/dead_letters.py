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

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common.domain.dead_letters import DeadLetterFilter, ReplayOutcome, ReplayRequest
from gnomon.common.errors import AlreadyExists, GnomonError, QuotaExceeded
from gnomon.common.quotas import Admit
from gnomon.common.storage import audit
from gnomon.common.storage import dead_letters as dlq
from gnomon.common.storage import jobs as jobs_store
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
        self,
        f: DeadLetterFilter,
        *,
        include_replayed: bool,
        limit: int,
        after: Keyset | None,
        budget_bytes: int | None = None,
    ) -> tuple[list[Row], dict[uuid.UUID, list[Row]], int]:
        """A page of dead jobs matching ``f`` read with ``limit`` (page size + 1), newest death first,
        strictly after ``after`` (``(finished_at, id)``), as ``(rows, attempts, k)``: payloads and
        recent attempts (job id -> oldest first) are read only for the first ``k`` rows, those within
        ``budget_bytes`` (None: the whole page; :func:`gnomon.common.storage.jobs.budget_payloads`),
        and ``rows`` keeps one row after them (a next page exists); one transaction. The caller pages
        ``rows`` with page size ``k``."""

        async def read(conn):
            rows = await dlq.list_dead_letters(
                conn, f, include_replayed=include_replayed, limit=limit, after=after
            )
            k = await jobs_store.budget_payloads(
                conn, rows, size=limit - 1, budget_bytes=budget_bytes or (1 << 62)
            )
            return rows[: k + 1], await dlq.recent_attempts(conn, [r["id"] for r in rows[:k]]), k

        return await run_transaction(self.engine, read)

    async def replay(self, req: ReplayRequest, *, admit: Admit | None = None) -> ReplayOutcome:
        """Runs the replay ``req`` (:func:`gnomon.common.storage.dead_letters.replay_dead_letters`;
        ``admit(target)``, None: no quota, admits its jobs inside its first transaction, before
        anything is written), then wakes the dispatchers when it created jobs (not for a dry run).
        A refusal of that first transaction (QuotaExceeded, AlreadyExists) wrote nothing: it is
        audited (:meth:`audit_refusal`) and re-raised. No error is raised once a job was written."""
        try:
            out = await dlq.replay_dead_letters(self.engine, req, shards=self.shards, admit=admit)
        except (QuotaExceeded, AlreadyExists) as e:
            err: GnomonError = e
            await run_transaction(self.engine, lambda c: self.audit_refusal(c, req, err))
            raise
        if self.wake_dispatchers is not None and out.replayed and not out.dry_run:
            self.wake_dispatchers(datetime.now(UTC))
        return out

    @staticmethod
    async def audit_refusal(conn: AsyncConnection, req: ReplayRequest, err: GnomonError) -> None:
        """Records replay ``req`` refused with ``err``: action ``dead_letters.replay`` (or its dry-run
        action), ``outcome`` the error's gRPC code name (e.g. RESOURCE_EXHAUSTED), details the request
        with ``replay_count`` 0, ``refused`` (the error reason), ``message`` and the error metadata
        as ``error_<key>`` (e.g. ``error_quota``)."""
        details = dlq.audit_details(req, 0)
        details.pop("matched_count", None)
        details.update(
            replay_count=0,
            refused=err.reason,
            message=str(err)[:500],
            **{f"error_{k}": v for k, v in err.metadata.items()},
        )
        await audit.insert_audit_entry(
            conn,
            namespace=req.filter.namespace,
            actor=req.actor,
            action=dlq.ACTION_REPLAY_DRY_RUN if req.dry_run else dlq.ACTION_REPLAY,
            reason=req.reason,
            request_id=req.request_id,
            details=details,
            outcome=err.code.name,
        )

    async def audit_entries(self, namespace: str, *, limit: int, after: Keyset | None) -> list[Row]:
        """Up to ``limit`` audit entries of ``namespace``, newest first, strictly after ``after``
        (``(created_at, id)``)."""
        return await run_transaction(
            self.engine, lambda c: audit.list_audit_entries(c, namespace, limit=limit, after=after)
        )
