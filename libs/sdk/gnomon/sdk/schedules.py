"""Recurring schedules (``gnomon.v1.ScheduleService``): the :class:`~gnomon.sdk.AsyncClient` methods
that create, read, change, pause, trigger, backfill and preview schedules and list their occurrence
records (request builders: :mod:`gnomon.sdk.schedule_requests`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2

from . import convert
from .base import ClientBase, Payload, Span, paginate
from .models import Job, OutagePrediction, PreviewFireTime, RetryPolicy, Schedule, ScheduleOccurrence
from .schedule_requests import (
    TEMPLATE_FIELDS,
    backfill_schedule_request,
    create_schedule_request,
    list_occurrences_request,
    list_schedules_request,
    overlap_value,
    preview_schedule_request,
    schedule_name,
    simulate_outage_request,
    update_schedule_request,
)

__all__ = ["SchedulesClient"]


class SchedulesClient(ClientBase):
    """The schedule methods of :class:`~gnomon.sdk.AsyncClient` (``ScheduleService``)."""

    async def create_schedule(
        self,
        queue: str,
        *,
        cron: str | None = None,
        rrule: str | None = None,
        every: Span | None = None,
        time_zone: str = "UTC",
        schedule_id: str = "",
        payload: Payload = b"",
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        misfire_policy: str | int | None = None,
        misfire_grace: Span | None = None,
        catchup_window: Span | None = None,
        max_catchup: int | None = None,
        overlap_policy: str | int | None = None,
        dst_gap: str | int | None = None,
        dst_fold: str | int | None = None,
        jitter: Span | None = None,
        paused: bool = False,
        idempotent: bool = False,
        max_attempts: int | None = None,
        lease_duration: Span | None = None,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        start_to_close: Span | None = None,
        start_deadline: Span | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> Schedule:
        """Creates a recurring schedule whose occurrences become jobs on ``queue``; returns it.

        Args:
            queue: queue of every occurrence job.
            cron / rrule / every: the rule, exactly one: cron text (5 or 6 fields, ``@daily`` ...),
                RFC 5545 text, or a fixed interval (``timedelta`` or seconds; needs ``start_time``).
            time_zone: IANA zone the rule is evaluated in (``"Europe/Berlin"``).
            schedule_id: ``[a-z0-9-]`` id (1-63 chars, starting with a letter); "": a UUID.
            payload: as :meth:`create_job` (bytes, str, dict/list as JSON).
            start_time / end_time: aware datetimes bounding the occurrences.
            misfire_policy: ``"RUN_LATEST"`` (default), ``"SKIP"``, ``"COALESCE"``, ``"RUN_ALL"``.
            misfire_grace / catchup_window / jitter: spans; max_catchup: RUN_ALL's limit.
            overlap_policy: ``"SKIP"`` (default), ``"ALLOW"``, ``"BUFFER_ONE"``, ``"BUFFER_ALL"``,
                ``"CANCEL_OTHER"``.
            dst_gap: ``"SHIFT_FORWARD"`` (default) or ``"SKIP"``; dst_fold: ``"FIRST"`` (default),
                ``"SECOND"``, ``"BOTH"``.
            paused: create it paused. idempotent, max_attempts, lease_duration, retry_policy,
                start_to_close, start_deadline: the job template (see :meth:`create_job`).
            request_id: UUID making the create idempotent.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (reason ``INVALID_CRON``, ``INVALID_TIME_ZONE``,
                ``RULE_NEVER_FIRES`` ... and ``field_violations``), ``ALREADY_EXISTS``
                (``SCHEDULE_EXISTS``), ...
            TypeError, ValueError: arguments that cannot be encoded (two rules, unknown policy).
        """
        req = create_schedule_request(
            self.namespace,
            queue,
            cron=cron,
            rrule=rrule,
            every=every,
            time_zone=time_zone,
            schedule_id=schedule_id,
            payload=payload,
            start_time=start_time,
            end_time=end_time,
            misfire_policy=misfire_policy,
            misfire_grace=misfire_grace,
            catchup_window=catchup_window,
            max_catchup=max_catchup,
            overlap_policy=overlap_policy,
            dst_gap=dst_gap,
            dst_fold=dst_fold,
            jitter=jitter,
            paused=paused,
            idempotent=idempotent,
            max_attempts=max_attempts,
            lease_duration=lease_duration,
            retry_policy=retry_policy,
            start_to_close=start_to_close,
            start_deadline=start_deadline,
            request_id=request_id,
        )
        return convert.schedule_from_proto((await self._call(self._schedules.CreateSchedule, req)).schedule)

    async def get_schedule(self, name: str) -> Schedule:
        """Reads a schedule by full name or bare id (this client's namespace).

        Raises:
            GnomonError: ``NOT_FOUND`` (``SCHEDULE_NOT_FOUND``). ValueError: a malformed name.
        """
        return convert.schedule_from_proto(await self._get_schedule_message(name))

    async def _get_schedule_message(self, name: str) -> schedule_pb2.Schedule:
        req = schedule_service_pb2.GetScheduleRequest(name=schedule_name(name, self.namespace))
        resp: schedule_service_pb2.GetScheduleResponse = await self._call(self._schedules.GetSchedule, req)
        return resp.schedule

    async def list_schedules_page(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[Schedule], str]:
        """One page of schedules ordered by id: ``(schedules, next_page_token)`` ("" on the last page).
        ``paused``: True only paused, False only active, None any; ``queue``: only this queue;
        ``page_size`` 1-1000; ``page_token`` from the previous page.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (a bad page token), ...
        """
        resp = await self._call(
            self._schedules.ListSchedules,
            list_schedules_request(self.namespace, paused, queue, page_size, page_token),
        )
        return [convert.schedule_from_proto(x) for x in resp.schedules], resp.next_page_token

    def list_schedules(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Schedule]:
        """Iterates over all matching schedules, fetching pages lazily.

        Raises (while iterating): :class:`GnomonError` as :meth:`list_schedules_page`.
        """
        return paginate(lambda token: self.list_schedules_page(paused, queue, page_size, token))

    async def update_schedule(self, /, name: str, etag: str | None = None, **fields: Any) -> Schedule:
        """Changes the given fields only (the ``update_mask`` names exactly them); returns the schedule.

        ``fields``: any of :data:`SCHEDULE_FIELDS` (``cron``/``rrule``/``every`` replace the rule;
        ``None`` resets a field to its default / clears it) and of :data:`TEMPLATE_FIELDS` (``queue``,
        ``payload``, ``max_attempts`` ...: the current template is read first and only those change).
        ``etag``: update only if the schedule is still at it.

        Raises:
            GnomonError: ``INVALID_ARGUMENT``, ``NOT_FOUND``, ``FAILED_PRECONDITION`` (``STALE_VERSION``).
            TypeError, ValueError: unknown field, nothing to update, two rules, unknown policy.
        """
        current = (
            await self._get_schedule_message(name) if any(k in TEMPLATE_FIELDS for k in fields) else None
        )
        req = update_schedule_request(name, self.namespace, etag, current, **fields)
        return convert.schedule_from_proto((await self._call(self._schedules.UpdateSchedule, req)).schedule)

    async def delete_schedule(self, name: str, etag: str | None = None) -> int:
        """Deletes a schedule (and its not-yet-dispatched future occurrence jobs); returns how many
        such jobs were withdrawn.

        Raises:
            GnomonError: ``NOT_FOUND``, ``FAILED_PRECONDITION`` (``STALE_VERSION``).
        """
        req = schedule_service_pb2.DeleteScheduleRequest(
            name=schedule_name(name, self.namespace), etag=etag or ""
        )
        resp: schedule_service_pb2.DeleteScheduleResponse = await self._call(
            self._schedules.DeleteSchedule, req
        )
        return resp.withdrawn_jobs

    async def pause_schedule(self, name: str) -> Schedule:
        """Pauses a schedule (idempotent); returns it.

        Raises:
            GnomonError: ``NOT_FOUND`` (``SCHEDULE_NOT_FOUND``), ``UNAVAILABLE``, ...
            ValueError: a malformed name.
        """
        req = schedule_service_pb2.PauseScheduleRequest(name=schedule_name(name, self.namespace))
        return convert.schedule_from_proto((await self._call(self._schedules.PauseSchedule, req)).schedule)

    async def resume_schedule(self, name: str) -> Schedule:
        """Resumes a schedule (idempotent; times missed while paused are SKIPPED_PAUSED); returns it.

        Raises:
            GnomonError: ``NOT_FOUND`` (``SCHEDULE_NOT_FOUND``), ``UNAVAILABLE``, ...
            ValueError: a malformed name.
        """
        req = schedule_service_pb2.ResumeScheduleRequest(name=schedule_name(name, self.namespace))
        return convert.schedule_from_proto((await self._call(self._schedules.ResumeSchedule, req)).schedule)

    async def trigger_schedule(
        self, name: str, overlap_policy: str | int | None = None, request_id: str | uuid.UUID | None = None
    ) -> tuple[ScheduleOccurrence, Job | None]:
        """Runs the schedule now as an extra occurrence: ``(occurrence, job or None)`` (no job when
        it was BUFFERED or SKIPPED_OVERLAP). ``overlap_policy`` overrides the schedule's for this run;
        ``request_id`` (UUID) makes the trigger idempotent.

        Raises:
            GnomonError: ``NOT_FOUND``, ``FAILED_PRECONDITION`` (e.g. a paused schedule), ...
            ValueError: a malformed name or an unknown overlap policy.
        """
        req = schedule_service_pb2.TriggerScheduleRequest(
            name=schedule_name(name, self.namespace),
            overlap_policy=overlap_value(overlap_policy),
            request_id=str(request_id) if request_id is not None else "",
        )
        resp = await self._call(self._schedules.TriggerSchedule, req)
        job = convert.job_from_proto(resp.job) if resp.HasField("job") else None
        return convert.occurrence_from_proto(resp.occurrence), job

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime, overlap_policy: str | int | None = None
    ) -> list[ScheduleOccurrence]:
        """Plans the rule's nominal times in ``[start, end)`` again as BACKFILL occurrences; returns
        one record per nominal time (BUFFERED, DEDUPLICATED or SKIPPED_DST_GAP). ``start``/``end``
        are aware datetimes; ``end`` not after now.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (range empty, in the future or too long), ``NOT_FOUND``.
            TypeError, ValueError: naive datetimes, a malformed name, an unknown overlap policy.
        """
        req = backfill_schedule_request(name, self.namespace, start, end, overlap_policy)
        resp = await self._call(self._schedules.BackfillSchedule, req)
        return [convert.occurrence_from_proto(o) for o in resp.occurrences]

    async def preview_schedule(
        self,
        *,
        name: str | None = None,
        cron: str | None = None,
        rrule: str | None = None,
        every: Span | None = None,
        time_zone: str = "UTC",
        start: datetime | None = None,
        end: datetime | None = None,
        from_time: datetime | None = None,
        count: int = 10,
        dst_gap: str | int | None = None,
        dst_fold: str | int | None = None,
    ) -> list[PreviewFireTime]:
        """The next ``count`` fire times strictly after ``from_time`` (default: now) of the saved
        schedule ``name`` or of an unsaved rule (one of ``cron``/``rrule``/``every``); skipped
        nominal times (DST gap) are interleaved with ``skipped`` set. See :class:`~gnomon.sdk.PreviewFireTime`.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` with the rule's reason (``INVALID_CRON``,
                ``RULE_NEVER_FIRES``, ``INVALID_TIME_ZONE`` ...).
        """
        req = preview_schedule_request(
            self.namespace,
            name=name,
            cron=cron,
            rrule=rrule,
            every=every,
            time_zone=time_zone,
            start=start,
            end=end,
            from_time=from_time,
            count=count,
            dst_gap=dst_gap,
            dst_fold=dst_fold,
        )
        resp = await self._call(self._schedules.PreviewSchedule, req)
        return [convert.fire_time_from_proto(f) for f in resp.fire_times]

    async def list_schedule_occurrences_page(
        self, name: str, decision: str | int | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[ScheduleOccurrence], str]:
        """One page of a schedule's decision records, newest nominal time first:
        ``(occurrences, next_page_token)`` ("" on the last page); ``decision`` e.g. ``"FIRED"``.

        Raises:
            GnomonError: ``NOT_FOUND``, ``INVALID_ARGUMENT`` (a bad page token).
            ValueError: a malformed name or an unknown decision.
        """
        req = list_occurrences_request(name, self.namespace, decision, page_size, page_token)
        resp = await self._call(self._schedules.ListScheduleOccurrences, req)
        return [convert.occurrence_from_proto(o) for o in resp.occurrences], resp.next_page_token

    def list_schedule_occurrences(
        self, name: str, decision: str | int | None = None, page_size: int = 100
    ) -> AsyncIterator[ScheduleOccurrence]:
        """Iterates over a schedule's decision records (newest first; ``decision`` e.g.
        ``"SKIPPED_OVERLAP"``), fetching pages lazily.

        Raises (while iterating): as :meth:`list_schedule_occurrences_page`.
        """
        return paginate(lambda token: self.list_schedule_occurrences_page(name, decision, page_size, token))

    async def simulate_outage(
        self,
        start: datetime,
        end: datetime,
        name: str | None = None,
        *,
        namespace: str | None = None,
        assume_active: int = 0,
        page_size: int = 0,
        page_token: str = "",
        max_runs: int = 0,
    ) -> tuple[list[OutagePrediction], str]:
        """Predicts what the planner does if it is down from ``start`` to ``end`` (aware datetimes)
        for the schedule ``name`` (an id or a full name) or, without a name, one page of the schedules
        of ``namespace`` (default: the client's): ``(predictions, next_page_token)`` ("" on the last
        page). ``assume_active``: earlier occurrences assumed still active at ``end`` (0-1000);
        ``page_size`` 0-100 (0 = 20); ``max_runs``: runs listed per schedule (0-1000, 0 = 100). Writes
        nothing. See :class:`~gnomon.sdk.OutagePrediction`.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (end not after start, longer than 366 days, more than
                100000 nominal times), ``NOT_FOUND``.
            TypeError, ValueError: naive datetimes, a malformed name.
        """
        req = simulate_outage_request(
            start,
            end,
            name=name,
            namespace=namespace or self.namespace,
            assume_active=assume_active,
            page_size=page_size,
            page_token=page_token,
            max_runs=max_runs,
        )
        resp = await self._call(self._schedules.SimulateOutage, req)
        return [convert.prediction_from_proto(p) for p in resp.predictions], resp.next_page_token
