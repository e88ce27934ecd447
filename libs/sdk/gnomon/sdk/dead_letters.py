"""The dead-letter queue (``gnomon.v1.DeadLetterService``): the request builders and the
:class:`~gnomon.sdk.AsyncClient` methods that list and replay dead letters and read the audit log.

Replays are audited under the principal the client authenticates as (its API key; see
docs/security.md), never under a name the client claims.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb

from . import convert
from .base import ClientBase, paginate
from .failures import FailureClass
from .models import AuditEntry, DeadLetter, ReplayResult

__all__ = [
    "DeadLettersClient",
    "list_dead_letters_request",
    "replay_dead_letters_request",
    "list_audit_entries_request",
]


def _filters(
    req: pb.ListDeadLettersRequest | pb.ReplayDeadLettersRequest,
    queue: str | None,
    failure_class: FailureClass | str | None,
    error_contains: str | None,
    start_time: datetime | None,
    end_time: datetime | None,
) -> None:
    req.queue = queue or ""
    req.failure_class = FailureClass.coerce(failure_class) if failure_class else 0  # type: ignore[assignment]
    req.error_contains = error_contains or ""
    if start_time is not None:
        req.start_time.CopyFrom(convert.to_timestamp(start_time))
    if end_time is not None:
        req.end_time.CopyFrom(convert.to_timestamp(end_time))


def list_dead_letters_request(
    namespace: str,
    *,
    queue: str | None = None,
    failure_class: FailureClass | str | None = None,
    error_contains: str | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    include_replayed: bool = False,
    page_size: int = 100,
    page_token: str = "",
) -> pb.ListDeadLettersRequest:
    """Builds a ``ListDeadLettersRequest`` (argument meanings: :meth:`gnomon.sdk.Client.list_dead_letters`).

    Raises:
        TypeError, ValueError: a time that is not an aware ``datetime``; ValueError: a
            ``failure_class`` that is no :class:`~gnomon.sdk.FailureClass` (member, name or number).
    """
    req = pb.ListDeadLettersRequest(
        parent=convert.namespace_parent(namespace),
        include_replayed=include_replayed,
        page_size=int(page_size),
        page_token=page_token or "",
    )
    _filters(req, queue, failure_class, error_contains, start_time, end_time)
    return req


def replay_dead_letters_request(
    namespace: str,
    *,
    max_rate: float,
    max_jobs: int,
    reason: str,
    queue: str | None = None,
    failure_class: FailureClass | str | None = None,
    error_contains: str | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    dry_run: bool = False,
    request_id: str | uuid.UUID | None = None,
) -> pb.ReplayDeadLettersRequest:
    """Builds a ``ReplayDeadLettersRequest``; a missing ``request_id`` gets a fresh UUID.

    Raises:
        TypeError, ValueError: a time that is not an aware ``datetime``; ValueError: a
            ``failure_class`` that is no :class:`~gnomon.sdk.FailureClass` (member, name or number).
    """
    req = pb.ReplayDeadLettersRequest(
        parent=convert.namespace_parent(namespace),
        max_rate=float(max_rate),
        max_jobs=int(max_jobs),
        dry_run=bool(dry_run),
        reason=reason,
        request_id=str(request_id or uuid.uuid4()),
    )
    _filters(req, queue, failure_class, error_contains, start_time, end_time)
    return req


def list_audit_entries_request(
    namespace: str, page_size: int = 100, page_token: str = ""
) -> pb.ListAuditEntriesRequest:
    """Builds a ``ListAuditEntriesRequest`` (``page_size`` 1-1000)."""
    return pb.ListAuditEntriesRequest(
        parent=convert.namespace_parent(namespace), page_size=int(page_size), page_token=page_token or ""
    )


class DeadLettersClient(ClientBase):
    """The dead-letter methods of :class:`~gnomon.sdk.AsyncClient` (``DeadLetterService``)."""

    async def list_dead_letters_page(
        self,
        *,
        queue: str | None = None,
        failure_class: FailureClass | str | None = None,
        error_contains: str | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        include_replayed: bool = False,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[DeadLetter], str]:
        """One page of dead letters (jobs in state DEAD), most recently finished first:
        ``(dead_letters, next_page_token)``, the token "" on the last page.

        Args:
            queue: only this queue. failure_class: only this class of last failure (a
                :class:`~gnomon.sdk.FailureClass` or its name, e.g. ``"PERMANENT"``). error_contains: only those whose last error contains this text
                (case-insensitive). start_time / end_time: aware datetimes, finish time in
                ``[start_time, end_time)``. include_replayed: also those replayed already.
            page_size: 1-1000. page_token: from the previous page (other arguments unchanged).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (field violations), ``PERMISSION_DENIED``, ...
        """
        req = list_dead_letters_request(
            self.namespace,
            queue=queue,
            failure_class=failure_class,
            error_contains=error_contains,
            start_time=start_time,
            end_time=end_time,
            include_replayed=include_replayed,
            page_size=page_size,
            page_token=page_token,
        )
        resp = await self._call(self._dead_letters.ListDeadLetters, req)
        return [convert.dead_letter_from_proto(d) for d in resp.dead_letters], resp.next_page_token

    def list_dead_letters(
        self,
        *,
        queue: str | None = None,
        failure_class: FailureClass | str | None = None,
        error_contains: str | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        include_replayed: bool = False,
        page_size: int = 100,
    ) -> AsyncIterator[DeadLetter]:
        """Iterates over all matching dead letters (filters as :meth:`list_dead_letters_page`),
        fetching pages lazily.

        Raises (while iterating): :class:`GnomonError` as :meth:`list_dead_letters_page`.
        """
        return paginate(
            lambda token: self.list_dead_letters_page(
                queue=queue,
                failure_class=failure_class,
                error_contains=error_contains,
                start_time=start_time,
                end_time=end_time,
                include_replayed=include_replayed,
                page_size=page_size,
                page_token=token,
            )
        )

    async def replay_dead_letters(
        self,
        *,
        max_rate: float,
        max_jobs: int,
        reason: str,
        queue: str | None = None,
        failure_class: FailureClass | str | None = None,
        error_contains: str | None = None,
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        dry_run: bool = False,
        request_id: str | uuid.UUID | None = None,
        timeout: float | None = None,
    ) -> ReplayResult:
        """Replays matching dead letters (filters as :meth:`list_dead_letters_page`, only those not
        replayed yet) as new jobs released at most ``max_rate`` per second (their schedule times
        are spaced ``1/max_rate`` s apart), oldest first, at most ``max_jobs``. The dead jobs stay
        DEAD and point at their replays (``replayed_by``). Audited (``reason``, the principal this
        client authenticates as, and its address).

        Args:
            max_rate: jobs per second, 0.001 <= max_rate <= 1000.
            max_jobs: 1-100000.
            reason: why (audit log), 1-1000 characters.
            dry_run: only count (and audit); nothing is replayed.
            request_id: UUID making the call idempotent; default a fresh one (see
                :attr:`ReplayResult.request_id`). Repeating it returns the same result, and finishes
                a replay that was interrupted.
            timeout: seconds for this call (default: the client's); a replay of many thousand jobs
                takes a while (500 per transaction).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (field violations: ``max_rate``, ``max_jobs``,
                ``reason``, ...), ``ALREADY_EXISTS`` (``request_id`` used with another filter or
                rate), ``PERMISSION_DENIED`` (``NAMESPACE_NOT_ALLOWED``), ``UNAVAILABLE``, ...
        """
        req = replay_dead_letters_request(
            self.namespace,
            max_rate=max_rate,
            max_jobs=max_jobs,
            reason=reason,
            queue=queue,
            failure_class=failure_class,
            error_contains=error_contains,
            start_time=start_time,
            end_time=end_time,
            dry_run=dry_run,
            request_id=request_id,
        )
        resp = await self._call(self._dead_letters.ReplayDeadLetters, req, timeout)
        return convert.replay_result_from_proto(resp, req.request_id)

    async def list_audit_entries_page(
        self, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[AuditEntry], str]:
        """One page of this namespace's audit log (DLQ replays and dry runs), newest first:
        ``(entries, next_page_token)``.

        Raises:
            GnomonError: when the RPC fails.
        """
        req = list_audit_entries_request(self.namespace, page_size, page_token)
        resp = await self._call(self._dead_letters.ListAuditEntries, req)
        return [convert.audit_entry_from_proto(e) for e in resp.audit_entries], resp.next_page_token

    def list_audit_entries(self, page_size: int = 100) -> AsyncIterator[AuditEntry]:
        """Iterates over the whole audit log of this namespace, newest first, fetching pages lazily.

        Raises (while iterating): :class:`GnomonError` when an RPC fails.
        """
        return paginate(lambda token: self.list_audit_entries_page(page_size, token))
