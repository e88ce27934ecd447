"""The audit log of every mutating call, written by :class:`gnomon.common.rpc.auth.AuthInterceptor`.

Each mutating call (``mutating`` rules in :mod:`gnomon.common.auth.policy`) becomes one
``audit_log`` row: the authenticated principal (never a client-claimed name), namespace, method,
resource name, request id, outcome (gRPC code name), peer and time. Rows are buffered and written in
batches (one multi-row INSERT every ``flush_s`` seconds or 500 rows), so auditing costs a call no
round trip. A process that dies loses at most the last ``flush_s`` seconds of entries; the buffer is
flushed when the server drains. DLQ replays also write their own detailed entry in the replay's
transaction (:mod:`gnomon.common.storage.audit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.rpc.auth import Caller
from gnomon.common.storage import audit as audit_store
from gnomon.common.storage.engine import run_transaction

log = logging.getLogger(__name__)

_MAX_BATCH = 500
_MAX_BUFFER = 100_000


def _text(request: Any, field: str) -> str:
    fields = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    value = getattr(request, field, "") if field in fields else ""
    return value if isinstance(value, str) else ""


def _named(msg: Any) -> str:
    """``msg.name``, else the ``name`` of its first singular message field that has one."""
    if value := _text(msg, "name"):
        return value
    for f in getattr(getattr(msg, "DESCRIPTOR", None), "fields", ()):
        if f.message_type is not None and not f.is_repeated and msg.HasField(f.name):
            if value := _text(getattr(msg, f.name), "name"):
                return value
    return ""


def _resource(request: Any, response: Any) -> str:
    """The resource a call acted on: the ``name`` in the response (a created or changed resource,
    e.g. ``CreateJobResponse.job.name``), else in the request, else the request's ``parent``; for
    a grant, the principal granted to."""
    if principal := _text(request, "principal"):  # grants: principals/{p} (the namespace is its own column)
        return principal if principal.startswith("principals/") else f"principals/{principal}"
    return _named(response) or _named(request) or _text(request, "parent")


def _request_id(request: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(_text(request, "request_id")) if _text(request, "request_id") else None
    except ValueError:
        return None


class AuditLog:
    """Buffered writer of audit rows to ``engine`` (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, flush_s: float = 0.2) -> None:
        self.engine, self.flush_s = engine, flush_s
        self.pending: list[dict[str, Any]] = []
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # one flush at a time: two concurrent flushes (the background one and stop() or a caller's)
        # took the same batch, and the loser's failure left the caller reading before the winner's
        # commit (a CI run saw an entry missing right after flush() returned)
        self._flushing = asyncio.Lock()

    def record(
        self, *, caller: Caller, method: str, namespace: str | None, request: Any, response: Any, outcome: str
    ) -> None:
        """Buffers the entry of one finished call (never raises; beyond 100,000 buffered rows, while
        the database is down, the oldest are dropped and counted in :attr:`dropped`)."""
        if len(self.pending) >= _MAX_BUFFER:
            self.pending.pop(0)
            self.dropped += 1
        try:
            resource = _resource(request, response)[:512]
        except Exception:  # a message shape not foreseen: record the call without its resource
            log.debug("audit: no resource name found", exc_info=True)
            resource = ""
        self.pending.append(
            {
                "id": uuid.uuid4(),
                "namespace": namespace or "*",
                "created_at": datetime.now(UTC),
                "actor": caller.actor[:512],
                "action": method.rsplit("/", 1)[-1][:64],
                "reason": _text(request, "reason")[:1000],
                "request_id": _request_id(request),
                "details": "{}",
                "resource": resource,
                "outcome": outcome[:32],
                "peer": caller.peer[:128],
            }
        )
        if len(self.pending) >= _MAX_BATCH:
            self._wake.set()

    def start(self) -> None:
        """Starts the background flusher."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stops the flusher and writes what is buffered (errors are logged)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()

    async def flush(self) -> None:
        """Writes every buffered row now (after any flush already running); on a database error
        keeps them for the next flush."""
        async with self._flushing:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        while self.pending:
            batch = self.pending[:_MAX_BATCH]

            async def write(conn: Any, rows: list[dict[str, Any]] = batch) -> None:
                await audit_store.insert_audit_rows(conn, rows)

            try:
                await run_transaction(self.engine, write)
            except Exception:
                log.warning("audit log write failed; %d entries kept for the next flush", len(self.pending))
                return
            del self.pending[: len(batch)]

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_s)
            self._wake.clear()
            await self.flush()
