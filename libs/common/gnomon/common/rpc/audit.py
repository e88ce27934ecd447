"""The audit log of every mutating call, written by :class:`gnomon.common.rpc.auth.AuthInterceptor`.

Each mutating call (``mutating`` rules in :mod:`gnomon.common.auth.policy`) becomes one
``audit_log`` row: the authenticated principal (never a client-claimed name), namespace, method,
resource name, request id, outcome (gRPC code name), peer, time and ``count`` (how many calls the row
stands for). Rows are buffered and written in batches (every ``GNOMON_AUDIT_FLUSH_S`` seconds or 500
rows), so auditing costs a call no round trip. docs/security.md ("Audit") states the guarantees:

* **Escaped values.** Every text a client chose (resource, reason) and every other text column is
  escaped (:func:`escape`: backslash and non-printable characters as Python escapes, ``\\x00``), so
  a NUL or a forged newline cannot reach the table or a reader's terminal.
* **Isolated failures.** A batch the database refuses for one row's content is bisected
  (:func:`gnomon.common.storage.isolation.commit_isolated`): the other rows are written, the bad one
  is logged at ERROR (escaped, whole) and counted in ``gnomon_audit_rows_failed_total{reason="refused"}``.
  A database that is down keeps the rows buffered for the next flush.
* **Bounded buffer, shared fairly.** At ``GNOMON_AUDIT_BUFFER_ROWS`` buffered (or reserved) rows,
  or when the calling principal holds its share of them (``max(1, floor(buffer_rows *
  GNOMON_AUDIT_PRINCIPAL_SHARE))``), an audited call is refused with UNAVAILABLE
  (``AUDIT_UNAVAILABLE``) before it runs (:meth:`AuditLog.admit`): never an unaudited success, and
  the principal filling the buffer is refused before the others.
* **Coalesced refusals.** Refused calls (any outcome but ``OK``) of one (principal, namespace,
  method, outcome) within ``GNOMON_AUDIT_COALESCE_S`` share rows: the first is written at once, the
  others as one row whose ``count`` says how many when the window ends. A flood of refused calls
  costs at most two rows per key and window. A principal keeps at most
  ``GNOMON_AUDIT_COALESCE_PRINCIPAL_KEYS`` windows open (its windows in namespace ``*`` not
  counted) and the process at most ``GNOMON_AUDIT_COALESCE_KEYS``; past either, the principal's new
  keys coalesce per (principal, method, outcome) in namespace ``*``. Windows end in creation order
  (all have the same length): ending them costs O(1) per window, never a scan of all of them.
* **Flushed at drain.** :meth:`AuditLog.stop` closes the windows and writes everything; what still
  cannot be written is logged at ERROR row by row and counted (``reason="shutdown"``), never dropped
  in silence.

DLQ replays also write their own detailed entry in the replay's transaction
(:mod:`gnomon.common.storage.audit`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import metrics
from gnomon.common.auth.settings import AuditSettings
from gnomon.common.errors import AuditUnavailable
from gnomon.common.rpc.auth import Caller
from gnomon.common.storage import audit as audit_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.isolation import commit_isolated

log = logging.getLogger(__name__)

_MAX_BATCH = 500
#: Attempts of the final flush at :meth:`AuditLog.stop` (a database briefly away), and the pause
#: between them, seconds.
_STOP_ATTEMPTS, _STOP_PAUSE_S = 3, 0.5

Row = dict[str, Any]
#: A coalescing key: (actor, namespace, action, outcome), escaped as in the row.
Key = tuple[str, str, str, str]


def escape(value: str, limit: int) -> str:
    """``value`` safe to store and show: backslash as ``\\\\`` and every non-printable character
    (``str.isprintable``: controls such as NUL and newline, format and separator characters) as its
    Python escape (``\\x00``, ``\\u200b``); then cut to ``limit`` characters. Printable text,
    non-ASCII letters included, is unchanged."""
    if value.isprintable() and "\\" not in value:
        return value[:limit]
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
        if len(out) >= limit:
            break
    return "".join(out)[:limit]


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


@dataclass
class _Window:
    """An open coalescing window of one key: until when (monotonic s), and the row gathering the
    refusals after the first (None until a second one comes)."""

    key: Key
    until: float
    held: Row | None = None


class AuditLog:
    """Buffered writer of audit rows to ``engine`` (see the module docstring). Settings come from
    ``GNOMON_AUDIT_*`` (:class:`gnomon.common.auth.settings.AuditSettings`); the keywords override them."""

    def __init__(
        self,
        engine: AsyncEngine,
        flush_s: float | None = None,
        *,
        buffer_rows: int | None = None,
        coalesce_s: float | None = None,
        coalesce_keys: int | None = None,
        principal_share: float | None = None,
        coalesce_principal_keys: int | None = None,
    ) -> None:
        s = AuditSettings()
        self.engine = engine
        self.flush_s = s.flush_s if flush_s is None else flush_s
        self.buffer_rows = s.buffer_rows if buffer_rows is None else buffer_rows
        self.coalesce_s = s.coalesce_s if coalesce_s is None else coalesce_s
        self.coalesce_keys = s.coalesce_keys if coalesce_keys is None else coalesce_keys
        share = s.principal_share if principal_share is None else principal_share
        #: rows (buffered or reserved) one principal may hold at most
        self.principal_rows = max(1, int(self.buffer_rows * share))
        self.coalesce_principal_keys = (
            s.coalesce_principal_keys if coalesce_principal_keys is None else coalesce_principal_keys
        )
        self.pending: list[Row] = []
        #: rows not written: refused by the database, or still buffered when stop() gave up
        self.failed = 0
        self._reserved = 0  # admitted calls still running: each will add a row
        self._held: dict[str, int] = {}  # per actor (escaped): rows buffered + reserved, never 0
        self._windows: dict[Key, _Window] = {}
        self._ends: collections.deque[_Window] = collections.deque()  # open windows, oldest first
        self._open: dict[str, int] = {}  # per actor: open windows outside namespace "*", never 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # one flush at a time: two concurrent flushes (the background one and stop() or a caller's)
        # took the same batch, and the loser's failure left the caller reading before the winner's
        # commit (a CI run saw an entry missing right after flush() returned)
        self._flushing = asyncio.Lock()

    def _full(self, actor: str | None = None) -> bool:
        """The buffer is full, or ``actor`` holds its share of it."""
        if len(self.pending) + self._reserved >= self.buffer_rows:
            return True
        return actor is not None and self._held.get(actor, 0) >= self.principal_rows

    def _count(self, actor: str, n: int) -> None:
        left = self._held.get(actor, 0) + n
        if left > 0:
            self._held[actor] = left
        else:
            self._held.pop(actor, None)

    def _append(self, row: Row) -> None:
        self.pending.append(row)
        self._count(row["actor"], 1)

    def _forget(self, rows: Iterable[Row]) -> None:
        """Uncounts ``rows``, just removed from the buffer (written, refused or lost)."""
        for row in rows:
            self._count(row["actor"], -1)

    def held(self, caller: Caller) -> int:
        """Rows ``caller``'s principal holds now: buffered plus reserved."""
        return self._held.get(escape(caller.actor, 512), 0)

    def admit(self, caller: Caller) -> None:
        """Reserves the row of ``caller``'s audited call about to run. Raises :class:`AuditUnavailable`
        (UNAVAILABLE, ``AUDIT_UNAVAILABLE``) when ``buffer_rows`` rows are buffered or reserved, or
        when the principal holds ``principal_rows`` of them (its share): the call must not run
        unaudited, and a principal filling the buffer is refused before the others. Pair it with
        ``record(..., admitted=True)``."""
        actor = escape(caller.actor, 512)
        if self._full(actor):
            metrics.AUDIT_BUFFER_FULL.add(1)
            self._wake.set()
            raise AuditUnavailable("the audit log cannot keep up; retry later")
        self._reserved += 1
        self._count(actor, 1)

    def record(
        self,
        *,
        caller: Caller,
        method: str,
        namespace: str | None,
        request: Any,
        response: Any,
        outcome: str,
        admitted: bool = False,
    ) -> None:
        """Buffers the entry of one finished call (never raises, never blocks); ``admitted``: the
        call's row was reserved with :meth:`admit`. A refused call (``outcome`` not ``OK``) is
        coalesced with others of its key (module docstring)."""
        if admitted:
            self._reserved = max(0, self._reserved - 1)
            self._count(escape(caller.actor, 512), -1)
        try:
            resource = _resource(request, response)
        except Exception:  # a message shape not foreseen: record the call without its resource
            log.debug("audit: no resource name found", exc_info=True)
            resource = ""
        row: Row = {
            "id": uuid.uuid4(),
            "namespace": escape(namespace or "*", 63),
            "created_at": datetime.now(UTC),
            "actor": escape(caller.actor, 512),
            "action": escape(method.rsplit("/", 1)[-1], 64),
            "reason": escape(_text(request, "reason"), 1000),
            "request_id": _request_id(request),
            "details": "{}",
            "resource": escape(resource, 512),
            "outcome": escape(outcome, 32),
            "peer": escape(caller.peer, 128),
            "count": 1,
        }
        if outcome != "OK" and self.coalesce_s > 0:
            self._coalesce(row)
        else:
            self._append(row)
        if len(self.pending) >= _MAX_BATCH:
            self._wake.set()

    def _coalesce(self, row: Row) -> None:
        """Buffers refused ``row`` as the first of its window, or folds it into the window's held row."""
        self._close_windows(time.monotonic())  # O(windows ended): every open window is now current
        actor = row["actor"]
        key: Key = (actor, row["namespace"], row["action"], row["outcome"])
        if (
            key not in self._windows
            and row["namespace"] != "*"
            and (
                self._open.get(actor, 0) >= self.coalesce_principal_keys
                or len(self._windows) >= self.coalesce_keys
            )
        ):  # this principal (or the process) has its windows: coalesce across namespaces
            row["namespace"] = "*"
            key = (actor, "*", row["action"], row["outcome"])
        w = self._windows.get(key)
        if w is not None:
            if w.held is None:
                w.held = row
            else:
                w.held["count"] += 1
                w.held["details"] = json.dumps({"last_time": datetime.now(UTC).isoformat()})
                metrics.AUDIT_COALESCED.add(1)
            return
        w = self._windows[key] = _Window(key, time.monotonic() + self.coalesce_s)
        self._ends.append(w)
        if key[1] != "*":
            self._open[actor] = self._open.get(actor, 0) + 1
        if self._full(actor):  # no room for it now: it waits for the end of its window
            w.held = row
        else:
            self._append(row)

    def _close_windows(self, now: float | None = None) -> None:
        """Ends the coalescing windows past their time (all of them when ``now`` is None); their held
        rows join the buffer. Windows all last ``coalesce_s``, so they end in creation order: this
        pops them from the front of a deque, O(1) per window ended."""
        while self._ends and (now is None or now >= self._ends[0].until):
            w = self._ends.popleft()
            del self._windows[w.key]
            actor, ns = w.key[0], w.key[1]
            if ns != "*":
                if self._open[actor] > 1:
                    self._open[actor] -= 1
                else:
                    del self._open[actor]
            if w.held is not None:
                self._append(w.held)

    def start(self) -> None:
        """Starts the background flusher."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stops the flusher, closes every coalescing window and writes what is buffered (trying
        :data:`_STOP_ATTEMPTS` times while the database is unreachable). Rows still unwritten are
        logged at ERROR, one line each, and counted in ``gnomon_audit_rows_failed_total{reason="shutdown"}``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._close_windows()
        for attempt in range(_STOP_ATTEMPTS):
            if await self.flush():
                return
            if attempt + 1 < _STOP_ATTEMPTS:
                await asyncio.sleep(_STOP_PAUSE_S)
        lost, self.pending = self.pending, []
        self._forget(lost)
        for row in lost:
            log.error("audit row not written at shutdown: %s", _row_text(row))
        self.failed += len(lost)
        metrics.AUDIT_ROWS_FAILED.add(len(lost), {"reason": "shutdown"})

    async def flush(self) -> bool:
        """Writes every buffered row now (after any flush already running). A row the database
        refuses for its content is isolated, logged and counted; on any other database error the
        unwritten rows are kept for the next flush and False is returned."""
        async with self._flushing:
            return await self._flush_locked()

    async def _write(self, rows: list[Row]) -> None:
        async def write(conn: Any) -> None:
            await audit_store.insert_audit_rows(conn, list(rows))

        await run_transaction(self.engine, write)

    def _refused(self, row: Row, exc: BaseException) -> None:
        log.error(
            "audit row refused by the database (%s), not written: %s", type(exc).__name__, _row_text(row)
        )
        self.failed += 1
        metrics.AUDIT_ROWS_FAILED.add(1, {"reason": "refused"})

    async def _flush_locked(self) -> bool:
        while self.pending:
            if not await self._flush_batch(self.pending[:_MAX_BATCH]):
                return False
        return True

    async def _flush_batch(self, batch: list[Row]) -> bool:
        """Writes ``batch`` (the head of the buffer), isolating refused rows; removes from the buffer
        what was written or refused. False when the database failed (the rest stays buffered)."""
        done: set[int] = set()  # id() of the rows written or refused

        def committed(part: list[Row], _: None) -> None:
            done.update(id(r) for r in part)

        def refused(row: Row, exc: BaseException) -> None:
            done.add(id(row))
            self._refused(row, exc)

        try:
            await commit_isolated(batch, self._write, committed=committed, refused=refused)
        except Exception:
            # rows are only ever appended while we wait, so the batch is still the buffer's head
            self.pending[: len(batch)] = [r for r in batch if id(r) not in done]
            self._forget(r for r in batch if id(r) in done)
            log.warning("audit log write failed; %d entries kept for the next flush", len(self.pending))
            return False
        del self.pending[: len(batch)]
        self._forget(batch)
        return True

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_s)
            self._wake.clear()
            self._close_windows(time.monotonic())
            await self.flush()


def _row_text(row: Row) -> str:
    """One log line's worth of ``row`` (its text columns are escaped already): JSON."""
    return json.dumps({k: str(v) if v is not None else None for k, v in row.items()}, sort_keys=True)
