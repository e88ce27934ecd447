"""The job client: create, read, list, cancel and reschedule jobs, manage recurring schedules
(``ScheduleService``), list dispatchers (sync :class:`Client` and :class:`AsyncClient` on ``grpc.aio``).

Both clients build the same requests (see :func:`create_job_request`, :func:`list_jobs_request`,
:func:`cancel_job_request`, :func:`reschedule_job_request`) and raise :class:`~gnomon.sdk.errors.GnomonError` for every failed RPC.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    queue_service_pb2,
    queue_service_pb2_grpc,
    schedule_pb2,
    schedule_service_pb2,
    schedule_service_pb2_grpc,
)

from . import convert
from . import dead_letters as _dlq
from .dead_letters import AuditEntry, DeadLetter, ReplayResult
from .errors import GnomonError
from .models import DispatcherInfo, Job, JobAttempt
from .queues import Queue, queue_name
from .retry import RetryPolicy, retry_policy_to_proto

__all__ = [
    "Client",
    "AsyncClient",
    "create_job_request",
    "list_jobs_request",
    "cancel_job_request",
    "reschedule_job_request",
    "CANCEL_OUTCOMES",
    "create_schedule_request",
    "update_schedule_request",
    "list_schedules_request",
    "backfill_schedule_request",
    "preview_schedule_request",
    "list_occurrences_request",
    "schedule_name",
    "schedule_dict",
    "occurrence_dict",
    "fire_time_dict",
]

DEFAULT_API = "127.0.0.1:7070"

Payload = bytes | bytearray | str | dict | list | None
Span = timedelta | float | int


def create_job_request(
    namespace: str,
    queue: str,
    payload: Payload = b"",
    *,
    schedule_time: datetime | None = None,
    delay: Span | None = None,
    deadline: datetime | None = None,
    max_attempts: int | None = None,
    request_id: str | uuid.UUID | None = None,
    idempotency_key: str | None = None,
    lease_duration: Span | None = None,
    idempotent: bool = False,
    retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
    start_to_close: Span | None = None,
) -> job_service_pb2.CreateJobRequest:
    """Builds a ``CreateJobRequest`` (argument meanings: see :meth:`Client.create_job`).

    Raises:
        TypeError: wrong payload/time/duration type.
        ValueError: naive datetime; both ``schedule_time`` and ``delay`` given.
    """
    if schedule_time is not None and delay is not None:
        raise ValueError("pass at most one of schedule_time and delay")
    req = job_service_pb2.CreateJobRequest(
        parent=convert.namespace_parent(namespace),
        queue=queue,
        payload=convert.encode_payload(payload),
    )
    if schedule_time is not None:
        req.schedule_time.CopyFrom(convert.to_timestamp(schedule_time))
    if delay is not None:
        req.delay.CopyFrom(convert.to_duration(delay))
    if deadline is not None:
        req.deadline.CopyFrom(convert.to_timestamp(deadline))
    if max_attempts is not None:
        req.max_attempts = int(max_attempts)
    if request_id is not None:
        req.request_id = str(request_id)
    if idempotency_key is not None:
        req.idempotency_key = idempotency_key
    if lease_duration is not None:
        req.lease_duration.CopyFrom(convert.to_duration(lease_duration))
    req.idempotent = bool(idempotent)
    if retry_policy is not None:
        req.retry_policy.CopyFrom(retry_policy_to_proto(retry_policy))
    if start_to_close is not None:
        req.start_to_close.CopyFrom(convert.to_duration(start_to_close))
    return req


def list_jobs_request(
    namespace: str,
    state: str | int | None = None,
    queue: str | None = None,
    page_size: int = 100,
    page_token: str = "",
) -> job_service_pb2.ListJobsRequest:
    """Builds a ``ListJobsRequest``; ``state`` as in :func:`gnomon.sdk.convert.state_value`.

    Raises:
        ValueError: unknown state.
    """
    return job_service_pb2.ListJobsRequest(
        parent=convert.namespace_parent(namespace),
        state=convert.state_value(state),
        queue=queue or "",
        page_size=int(page_size),
        page_token=page_token or "",
    )


#: What :meth:`Client.cancel_job` reports: the job was cancelled (it was SCHEDULED or QUEUED), its
#: cancellation was requested (RUNNING: the worker is told; the job ends SUCCEEDED if the handler
#: still succeeds, else CANCELLED), or it had finished already (nothing changed).
CANCEL_OUTCOMES = ("CANCELLED", "CANCEL_REQUESTED", "ALREADY_FINISHED")


def cancel_job_request(
    name: str, namespace: str, expected_version: int | None = None
) -> job_service_pb2.CancelJobRequest:
    """Builds a ``CancelJobRequest``; ``name`` is a full job name or a bare id in ``namespace``.

    Raises:
        ValueError: a malformed name.
    """
    req = job_service_pb2.CancelJobRequest(name=convert.job_name(name, namespace))
    if expected_version is not None:
        req.expected_version = int(expected_version)
    return req


def reschedule_job_request(
    name: str,
    namespace: str,
    *,
    schedule_time: datetime | None = None,
    delay: Span | None = None,
    expected_version: int | None = None,
) -> job_service_pb2.RescheduleJobRequest:
    """Builds a ``RescheduleJobRequest`` (argument meanings: see :meth:`Client.reschedule_job`).

    Raises:
        TypeError: wrong time/duration type.
        ValueError: malformed name, naive datetime, both ``schedule_time`` and ``delay`` given.
    """
    if schedule_time is not None and delay is not None:
        raise ValueError("pass at most one of schedule_time and delay")
    req = job_service_pb2.RescheduleJobRequest(name=convert.job_name(name, namespace))
    if schedule_time is not None:
        req.schedule_time.CopyFrom(convert.to_timestamp(schedule_time))
    if delay is not None:
        req.delay.CopyFrom(convert.to_duration(delay))
    if expected_version is not None:
        req.expected_version = int(expected_version)
    return req


def _outcome(value: int) -> str:
    """``CANCEL_OUTCOME_CANCELLED`` (enum number) -> ``"CANCELLED"``; unknown -> ``"UNKNOWN_<n>"``."""
    try:
        return job_service_pb2.CancelOutcome.Name(value).removeprefix("CANCEL_OUTCOME_")
    except ValueError:
        return f"UNKNOWN_{value}"


# -- recurring schedules (gnomon.v1.ScheduleService) --------------------------------------------

#: Keyword arguments of :meth:`Client.update_schedule` that belong to the job template (any of them
#: puts ``job_template`` in the mask; the other template fields keep their current values).
TEMPLATE_FIELDS = (
    "queue",
    "payload",
    "max_attempts",
    "idempotent",
    "lease_duration",
    "retry_policy",
    "start_to_close",
    "start_deadline",
)
#: Keyword arguments of :meth:`Client.update_schedule` that are schedule fields (``every`` is the
#: ``interval`` mask path; ``cron``/``rrule``/``every`` each replace the rule).
SCHEDULE_FIELDS = (
    "cron",
    "rrule",
    "every",
    "time_zone",
    "dst_gap",
    "dst_fold",
    "misfire_policy",
    "misfire_grace",
    "catchup_window",
    "max_catchup",
    "overlap_policy",
    "start_time",
    "end_time",
    "jitter",
    "job_template",
)


def enum_value(enum_type, prefix: str, value: str | int | None, what: str) -> int:
    """A policy/decision given as a short name (``"coalesce"``, ``"SKIP"``, ``"buffer-one"``), full
    name (``"MISFIRE_POLICY_COALESCE"``) or number -> the enum number; ``None``/``""`` -> 0
    (unspecified: the server's default).

    Raises:
        ValueError: an unknown name or number.
    """
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise ValueError(f"unknown {what} {value!r}")
    if isinstance(value, int):
        if value not in enum_type.values():
            raise ValueError(f"unknown {what} {value!r}")
        return value
    name = str(value).strip().upper().replace("-", "_")
    if not name.startswith(prefix):
        name = prefix + name
    try:
        return enum_type.Value(name)
    except ValueError:
        valid = ", ".join(n.removeprefix(prefix) for n, v in enum_type.items() if v)
        raise ValueError(f"unknown {what} {value!r}; expected one of {valid}") from None


def enum_text(enum_type, prefix: str, value: int) -> str:
    """Enum number -> short name (``MISFIRE_POLICY_COALESCE`` -> ``"COALESCE"``); unknown -> ``UNKNOWN_<n>``."""
    try:
        return enum_type.Name(value).removeprefix(prefix)
    except ValueError:
        return f"UNKNOWN_{value}"


def misfire_value(v):
    return enum_value(schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_", v, "misfire policy")


def overlap_value(v):
    return enum_value(schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_", v, "overlap policy")


def dst_gap_value(v):
    return enum_value(schedule_pb2.DstGapPolicy, "DST_GAP_POLICY_", v, "DST gap policy")


def dst_fold_value(v):
    return enum_value(schedule_pb2.DstFoldPolicy, "DST_FOLD_POLICY_", v, "DST fold policy")


def decision_value(v):
    return enum_value(schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_", v, "decision")


def schedule_name(name_or_id: str, namespace: str) -> str:
    """Full schedule name from a full name or a bare id (``"nightly"`` ->
    ``"namespaces/<namespace>/schedules/nightly"``).

    Raises:
        ValueError: empty, or contains ``/`` without being ``namespaces/*/schedules/*``.
    """
    if not name_or_id:
        raise ValueError("schedule name or id is empty")
    if "/" not in name_or_id:
        return f"{convert.namespace_parent(namespace)}/schedules/{name_or_id}"
    parts = name_or_id.split("/")
    if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "schedules" and parts[1] and parts[3]:
        return name_or_id
    raise ValueError(f"not a schedule name ('namespaces/{{ns}}/schedules/{{id}}') or bare id: {name_or_id!r}")


def _set_rule(msg, cron: str | None, rrule: str | None, every: Span | None, *, required: bool) -> None:
    given = [k for k, v in (("cron", cron), ("rrule", rrule), ("every", every)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"pass at most one of cron, rrule and every (got {', '.join(given)})")
    if not given:
        if required:
            raise ValueError("pass one of cron, rrule and every")
        return
    if cron is not None:
        msg.cron = cron
    elif rrule is not None:
        msg.rrule = rrule
    else:
        msg.interval.CopyFrom(convert.to_duration(every))


def _set_time(msg, field: str, value: datetime | None) -> None:
    if value is None:
        msg.ClearField(field)
    else:
        getattr(msg, field).CopyFrom(convert.to_timestamp(value))


def _set_span(msg, field: str, value: Span | None) -> None:
    if value is None:
        msg.ClearField(field)
    else:
        getattr(msg, field).CopyFrom(convert.to_duration(value))


def apply_template_fields(tpl: schedule_pb2.JobTemplate, fields: Mapping[str, Any]) -> None:
    """Sets the :data:`TEMPLATE_FIELDS` present in ``fields`` on ``tpl`` (``None`` clears an optional one)."""
    for k, v in fields.items():
        if k == "queue":
            tpl.queue = v or ""
        elif k == "payload":
            tpl.payload = convert.encode_payload(v)
        elif k == "max_attempts":
            if v is None:
                tpl.ClearField("max_attempts")
            else:
                tpl.max_attempts = int(v)
        elif k == "idempotent":
            tpl.idempotent = bool(v)
        elif k == "retry_policy":
            tpl.ClearField("retry_policy")
            if v is not None:
                tpl.retry_policy.CopyFrom(retry_policy_to_proto(v))
        elif k in ("lease_duration", "start_to_close", "start_deadline"):
            _set_span(tpl, k, v)
        else:
            raise TypeError(f"unknown job template field {k!r}")


def apply_schedule_fields(msg: schedule_pb2.Schedule, fields: Mapping[str, Any]) -> list[str]:
    """Sets the :data:`SCHEDULE_FIELDS` present in ``fields`` on ``msg`` and returns their
    ``update_mask`` paths (``every`` -> ``interval``). ``None`` clears a field (its server default).

    Raises:
        TypeError: an unknown field. ValueError: an unknown policy name, more than one rule.
    """
    paths: list[str] = []
    for k, v in fields.items():
        if k in ("cron", "rrule", "every"):
            if v is None:
                raise ValueError(f"{k} must not be None (a schedule always has a rule)")
            _set_rule(
                msg,
                v if k == "cron" else None,
                v if k == "rrule" else None,
                v if k == "every" else None,
                required=True,
            )
            paths.append("interval" if k == "every" else k)
        elif k == "time_zone":
            msg.time_zone = v or ""
        elif k == "dst_gap":
            msg.dst_gap = dst_gap_value(v)
        elif k == "dst_fold":
            msg.dst_fold = dst_fold_value(v)
        elif k == "misfire_policy":
            msg.misfire_policy = misfire_value(v)
        elif k == "overlap_policy":
            msg.overlap_policy = overlap_value(v)
        elif k == "max_catchup":
            msg.max_catchup = int(v or 0)
        elif k in ("misfire_grace", "catchup_window", "jitter"):
            _set_span(msg, k, v)
        elif k in ("start_time", "end_time"):
            _set_time(msg, k, v)
        elif k == "job_template":
            msg.ClearField("job_template")
            if v is not None:
                msg.job_template.CopyFrom(v)
        else:
            raise TypeError(
                f"unknown schedule field {k!r}; expected one of "
                f"{', '.join(SCHEDULE_FIELDS + TEMPLATE_FIELDS)}"
            )
        if k not in ("cron", "rrule", "every"):
            paths.append(k)
    if len([p for p in paths if p in ("cron", "rrule", "interval")]) > 1:
        raise ValueError("pass at most one of cron, rrule and every")
    return paths


def create_schedule_request(
    namespace: str,
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
) -> schedule_service_pb2.CreateScheduleRequest:
    """Builds a ``CreateScheduleRequest`` (argument meanings: see :meth:`Client.create_schedule`).

    Raises:
        TypeError: wrong payload/time/duration type.
        ValueError: not exactly one of cron/rrule/every, an unknown policy name, a naive datetime.
    """
    s = schedule_pb2.Schedule(time_zone=time_zone or "", paused=bool(paused))
    _set_rule(s, cron, rrule, every, required=True)
    apply_schedule_fields(
        s,
        {
            k: v
            for k, v in (
                ("misfire_policy", misfire_policy),
                ("overlap_policy", overlap_policy),
                ("dst_gap", dst_gap),
                ("dst_fold", dst_fold),
                ("max_catchup", max_catchup),
                ("misfire_grace", misfire_grace),
                ("catchup_window", catchup_window),
                ("jitter", jitter),
                ("start_time", start_time),
                ("end_time", end_time),
            )
            if v is not None
        },
    )
    apply_template_fields(
        s.job_template,
        {
            "queue": queue,
            "payload": payload,
            "idempotent": idempotent,
            **{
                k: v
                for k, v in (
                    ("max_attempts", max_attempts),
                    ("lease_duration", lease_duration),
                    ("retry_policy", retry_policy),
                    ("start_to_close", start_to_close),
                    ("start_deadline", start_deadline),
                )
                if v is not None
            },
        },
    )
    return schedule_service_pb2.CreateScheduleRequest(
        parent=convert.namespace_parent(namespace),
        schedule_id=schedule_id or "",
        schedule=s,
        request_id=str(request_id) if request_id is not None else "",
    )


def update_schedule_request(
    name: str,
    namespace: str,
    etag: str | None = None,
    current: schedule_pb2.Schedule | None = None,
    **fields: Any,
) -> schedule_service_pb2.UpdateScheduleRequest:
    """Builds an ``UpdateScheduleRequest`` whose ``update_mask`` names exactly the given ``fields``
    (see :meth:`Client.update_schedule`). Template fields (:data:`TEMPLATE_FIELDS`) are applied to a
    copy of ``current.job_template`` (required then) and sent as the ``job_template`` path.

    Raises:
        TypeError: an unknown field. ValueError: no field given, an unknown policy, two rules.
    """
    if not fields:
        raise ValueError("nothing to update: pass at least one field")
    tpl_fields = {k: fields.pop(k) for k in list(fields) if k in TEMPLATE_FIELDS}
    if tpl_fields and "job_template" in fields:
        raise ValueError("pass either job_template or individual template fields, not both")
    s = schedule_pb2.Schedule(name=schedule_name(name, namespace), etag=etag or "")
    paths = apply_schedule_fields(s, fields)
    if tpl_fields:
        if current is None:
            raise ValueError("template fields need the current schedule")
        s.job_template.CopyFrom(current.job_template)
        apply_template_fields(s.job_template, tpl_fields)
        paths.append("job_template")
    return schedule_service_pb2.UpdateScheduleRequest(
        schedule=s, update_mask=field_mask_pb2.FieldMask(paths=paths)
    )


def list_schedules_request(
    namespace: str,
    paused: bool | None = None,
    queue: str | None = None,
    page_size: int = 100,
    page_token: str = "",
) -> schedule_service_pb2.ListSchedulesRequest:
    """Builds a ``ListSchedulesRequest``; ``paused``: True only paused, False only active, None any."""
    flt = {
        None: schedule_service_pb2.PAUSED_FILTER_UNSPECIFIED,
        True: schedule_service_pb2.PAUSED_FILTER_PAUSED,
        False: schedule_service_pb2.PAUSED_FILTER_ACTIVE,
    }[None if paused is None else bool(paused)]
    return schedule_service_pb2.ListSchedulesRequest(
        parent=convert.namespace_parent(namespace),
        paused=flt,
        queue=queue or "",
        page_size=int(page_size),
        page_token=page_token or "",
    )


def backfill_schedule_request(
    name: str, namespace: str, start: datetime, end: datetime, overlap_policy: str | int | None = None
) -> schedule_service_pb2.BackfillScheduleRequest:
    """Builds a ``BackfillScheduleRequest`` for ``[start, end)``."""
    return schedule_service_pb2.BackfillScheduleRequest(
        name=schedule_name(name, namespace),
        start_time=convert.to_timestamp(start),
        end_time=convert.to_timestamp(end),
        overlap_policy=overlap_value(overlap_policy),
    )


def preview_schedule_request(
    namespace: str,
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
) -> schedule_service_pb2.PreviewScheduleRequest:
    """Builds a ``PreviewScheduleRequest``: of the saved schedule ``name``, or else of the unsaved
    rule (exactly one of ``cron``/``rrule``/``every``).

    Raises:
        ValueError: both a name and a rule, or neither; an unknown DST policy; a naive datetime.
    """
    req = schedule_service_pb2.PreviewScheduleRequest(count=int(count))
    if from_time is not None:
        req.from_time.CopyFrom(convert.to_timestamp(from_time))
    if name:
        if any(v is not None for v in (cron, rrule, every, start, end, dst_gap, dst_fold)):
            raise ValueError("pass either a saved schedule's name or a rule, not both")
        req.name = schedule_name(name, namespace)
        return req
    rule = req.rule
    _set_rule(rule, cron, rrule, every, required=True)
    rule.time_zone = time_zone or ""
    rule.dst_gap = dst_gap_value(dst_gap)
    rule.dst_fold = dst_fold_value(dst_fold)
    if start is not None:
        rule.start_time.CopyFrom(convert.to_timestamp(start))
    if end is not None:
        rule.end_time.CopyFrom(convert.to_timestamp(end))
    return req


def list_occurrences_request(
    name: str, namespace: str, decision: str | int | None = None, page_size: int = 100, page_token: str = ""
) -> schedule_service_pb2.ListScheduleOccurrencesRequest:
    """Builds a ``ListScheduleOccurrencesRequest`` (``decision``: e.g. ``"SKIPPED_OVERLAP"``)."""
    return schedule_service_pb2.ListScheduleOccurrencesRequest(
        parent=schedule_name(name, namespace),
        decision=decision_value(decision),
        page_size=int(page_size),
        page_token=page_token or "",
    )


def fire_time_dict(ft: schedule_pb2.PreviewFireTime) -> dict[str, Any]:
    """A ``PreviewFireTime`` as a JSON-friendly dict: ``fire_time`` (UTC RFC 3339, ``Z``),
    ``local_time`` (wall time with offset), ``note``, ``skipped``."""
    return {
        "fire_time": convert.rfc3339(convert.field_time(ft, "fire_time")),
        "local_time": ft.local_time,
        "note": ft.note,
        "skipped": ft.skipped,
    }


def occurrence_dict(o: schedule_pb2.ScheduleOccurrence) -> dict[str, Any]:
    """A ``ScheduleOccurrence`` as a JSON-friendly dict (times UTC RFC 3339, enums as short names)."""
    t = lambda f: convert.rfc3339(convert.field_time(o, f))  # noqa: E731
    d = {
        "name": o.name,
        "nominal_time": t("nominal_time"),
        "local_time": o.local_time,
        "decision": enum_text(schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_", o.decision),
        "source": enum_text(schedule_pb2.OccurrenceSource, "OCCURRENCE_SOURCE_", o.source),
        "note": o.note,
        "job": o.job or None,
        "schedule_time": t("schedule_time"),
        "decide_time": t("decide_time"),
    }
    if o.missed_count:
        d.update(
            missed_count=o.missed_count,
            missed_first_time=t("missed_first_time"),
            missed_last_time=t("missed_last_time"),
        )
    return d


def schedule_dict(s: schedule_pb2.Schedule) -> dict[str, Any]:
    """A ``Schedule`` as a JSON-friendly dict (proto field names; times RFC 3339; durations ``"30s"``;
    enums as short names; ``interval`` for an ``every`` rule)."""
    t = lambda f: convert.rfc3339(convert.field_time(s, f))  # noqa: E731
    sp = lambda m, f: convert.duration_text(convert.field_duration(m, f))  # noqa: E731
    which = s.WhichOneof("rule")
    tpl = s.job_template
    return {
        "name": s.name,
        "cron": s.cron if which == "cron" else None,
        "rrule": s.rrule if which == "rrule" else None,
        "interval": sp(s, "interval"),
        "time_zone": s.time_zone,
        "dst_gap": enum_text(schedule_pb2.DstGapPolicy, "DST_GAP_POLICY_", s.dst_gap),
        "dst_fold": enum_text(schedule_pb2.DstFoldPolicy, "DST_FOLD_POLICY_", s.dst_fold),
        "misfire_policy": enum_text(schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_", s.misfire_policy),
        "misfire_grace": sp(s, "misfire_grace"),
        "catchup_window": sp(s, "catchup_window"),
        "max_catchup": s.max_catchup,
        "overlap_policy": enum_text(schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_", s.overlap_policy),
        "start_time": t("start_time"),
        "end_time": t("end_time"),
        "jitter": sp(s, "jitter"),
        "job_template": {
            "queue": tpl.queue,
            "payload": convert.b64(tpl.payload),
            "max_attempts": tpl.max_attempts if tpl.HasField("max_attempts") else None,
            "lease_duration": sp(tpl, "lease_duration"),
            "idempotent": tpl.idempotent,
        },
        "paused": s.paused,
        "version": s.version,
        "etag": s.etag,
        "create_time": t("create_time"),
        "update_time": t("update_time"),
        "next_fire_time": t("next_fire_time"),
        "planned_through_time": t("planned_through_time"),
        "region": s.region,
        "tzdata_version": s.tzdata_version,
    }


class Client:
    """Synchronous client of the Gnomon API (``JobService`` + ``ClusterService``).

    Args:
        api: ``host:port`` of the API server.
        namespace: tenant namespace id (``"default"``) or ``"namespaces/<id>"``.
        timeout: per-call deadline in seconds (``None``: no deadline).
        credentials: ``grpc.ChannelCredentials`` for TLS; ``None`` -> plaintext.
        metadata: extra call metadata (e.g. auth headers) sent with every RPC.
        channel_options: extra ``grpc`` channel options.

    Every method raises :class:`GnomonError` when the RPC fails. Usable as a context manager
    (closes the channel on exit).
    """

    def __init__(
        self,
        api: str = DEFAULT_API,
        namespace: str = "default",
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace.removeprefix("namespaces/")
        self.timeout = timeout
        self._metadata = tuple(metadata or ())
        opts = list(channel_options or ())
        if credentials is None:
            self._channel = grpc.insecure_channel(api, options=opts)
        else:
            self._channel = grpc.secure_channel(api, credentials, options=opts)
        self._jobs = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_service_pb2_grpc.ClusterServiceStub(self._channel)
        self._queues = queue_service_pb2_grpc.QueueServiceStub(self._channel)
        self._schedules = schedule_service_pb2_grpc.ScheduleServiceStub(self._channel)

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata or None)
        except grpc.RpcError as err:
            raise GnomonError.from_rpc_error(err) from None

    def create_job(
        self,
        queue: str,
        payload: Payload = b"",
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        deadline: datetime | None = None,
        max_attempts: int | None = None,
        request_id: str | uuid.UUID | None = None,
        idempotency_key: str | None = None,
        lease_duration: Span | None = None,
        idempotent: bool = False,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        start_to_close: Span | None = None,
    ) -> Job:
        """Creates a one-time job and returns it (state ``SCHEDULED``).

        Args:
            queue: queue name (``[a-z0-9._-]``, 1-64 chars; validated by the server).
            payload: ``bytes`` (unchanged), ``str`` (UTF-8) or ``dict``/``list`` (JSON, UTF-8).
            schedule_time: aware ``datetime``: run at/after this instant. Exclusive with ``delay``.
            delay: run after this span from now (server clock): ``timedelta`` or float seconds.
            deadline: aware ``datetime``: past it an undispatched job becomes EXPIRED.
            max_attempts: 1-100 (server default 3).
            request_id: UUID making the create idempotent (a retry returns the original job).
            idempotency_key: key handed to every attempt (server default: the job id).
            lease_duration: per-attempt lease, ``timedelta`` or seconds (1 s - 1 h; default 30 s).
            idempotent: the effect is idempotent, so an attempt with an unknown outcome (lease lost
                while running) may be retried; otherwise such a job goes to the DLQ.
            start_to_close: the longest one attempt may run once started (``timedelta`` or
                seconds, 1 s - 7 days); past it the handler is cancelled and the attempt timed out.
            retry_policy: a :class:`~gnomon.sdk.RetryPolicy` or a dict with its keys (backoff,
                multiplier, jitter, max_age, non_retryable_errors); unset fields take the server's
                defaults (1 s initial, 300 s cap, x2, full jitter, no max age).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (see ``field_violations``), ``ALREADY_EXISTS``
                (``request_id`` reused for a different request), ``UNAVAILABLE``, ...
            TypeError, ValueError: arguments that cannot be encoded (naive datetime, both
                ``schedule_time`` and ``delay``, an unsupported payload type).
        """
        req = create_job_request(
            self.namespace,
            queue,
            payload,
            schedule_time=schedule_time,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            request_id=request_id,
            idempotency_key=idempotency_key,
            lease_duration=lease_duration,
            idempotent=idempotent,
            retry_policy=retry_policy,
            start_to_close=start_to_close,
        )
        return Job.from_proto(self._call(self._jobs.CreateJob, req).job)

    def get_job(self, name: str) -> Job:
        """Reads one job by full name (``namespaces/x/jobs/<id>``) or bare id (this client's
        namespace).

        Raises:
            GnomonError: ``NOT_FOUND`` if the job does not exist in that namespace.
            ValueError: a malformed name.
        """
        req = job_service_pb2.GetJobRequest(name=convert.job_name(name, self.namespace))
        return Job.from_proto(self._call(self._jobs.GetJob, req).job)

    def list_jobs_page(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[Job], str]:
        """Lists one page of jobs (newest first): ``(jobs, next_page_token)``; the token is ""
        on the last page.

        Args:
            state: ``"SCHEDULED"``/``"JOB_STATE_SCHEDULED"``/enum number, or ``None`` for any.
            queue: only this queue, or ``None`` for any.
            page_size: 1-1000.
            page_token: from the previous page (other arguments unchanged).

        Raises:
            GnomonError: e.g. ``INVALID_ARGUMENT`` for a bad page token.
            ValueError: unknown state name.
        """
        req = list_jobs_request(self.namespace, state, queue, page_size, page_token)
        resp = self._call(self._jobs.ListJobs, req)
        return [Job.from_proto(j) for j in resp.jobs], resp.next_page_token

    def list_jobs(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Iterates over all matching jobs (newest first), fetching pages lazily.

        Raises (while iterating): :class:`GnomonError`, ``ValueError`` as :meth:`list_jobs_page`.
        """
        token = ""
        while True:
            jobs, token = self.list_jobs_page(state, queue, page_size, token)
            yield from jobs
            if not token:
                return

    def cancel_job(self, name: str, expected_version: int | None = None) -> tuple[str, Job]:
        """Cancels a job; returns ``(outcome, job)``, ``outcome`` one of :data:`CANCEL_OUTCOMES`.

        A SCHEDULED or QUEUED job is ``CANCELLED`` at once (it will not run). A RUNNING job gets
        ``CANCEL_REQUESTED``: its handler sees ``ctx.cancelled`` and the job ends CANCELLED when
        the handler fails or raises :class:`~gnomon.sdk.Cancelled`, SUCCEEDED if it succeeds
        anyway; it is never retried. A finished job gives ``ALREADY_FINISHED`` and is unchanged.

        Args:
            name: full job name or bare id (this client's namespace).
            expected_version: cancel only if the job is at this version.

        Raises:
            GnomonError: ``NOT_FOUND``; ``FAILED_PRECONDITION`` (reason ``STALE_VERSION``) when
                ``expected_version`` differs; ``ABORTED`` (``CONCURRENT_MODIFICATION``), retry.
            ValueError: a malformed name.
        """
        resp = self._call(self._jobs.CancelJob, cancel_job_request(name, self.namespace, expected_version))
        return _outcome(resp.outcome), Job.from_proto(resp.job)

    def reschedule_job(
        self,
        name: str,
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        expected_version: int | None = None,
    ) -> Job:
        """Moves the schedule time of a job not yet dispatched (SCHEDULED); returns the job.

        Args:
            name: full job name or bare id (this client's namespace).
            schedule_time: aware ``datetime``: the new instant. Exclusive with ``delay``.
            delay: new time = now (server clock) + this span (``timedelta`` or seconds).
                Neither argument: now.
            expected_version: reschedule only if the job is at this version.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (``schedule_time``/``delay`` out of range, or not
                before the job's deadline); ``NOT_FOUND``; ``FAILED_PRECONDITION`` with reason
                ``JOB_NOT_RESCHEDULABLE`` (dispatched, running or finished) or ``STALE_VERSION``.
            TypeError, ValueError: arguments that cannot be encoded.
        """
        req = reschedule_job_request(
            name, self.namespace, schedule_time=schedule_time, delay=delay, expected_version=expected_version
        )
        return Job.from_proto(self._call(self._jobs.RescheduleJob, req).job)

    def list_job_attempts(self, name: str, page_size: int = 100) -> list[JobAttempt]:
        """The attempt history of a job, oldest first: who ran each attempt (worker, dispatcher,
        fencing token), how it ended (state, failure class, error) and when. Follows page tokens
        (a job has at most 100 attempts, so it is usually one call).

        Args:
            name: full job name (``namespaces/x/jobs/<id>``) or bare id (this client's namespace).
            page_size: attempts per call, 1-100.

        Raises:
            GnomonError: ``NOT_FOUND`` if the job does not exist in that namespace.
            ValueError: a malformed name.
        """
        parent, token, out = convert.job_name(name, self.namespace), "", []
        while True:
            req = job_service_pb2.ListJobAttemptsRequest(
                parent=parent, page_size=int(page_size), page_token=token
            )
            resp = self._call(self._jobs.ListJobAttempts, req)
            out.extend(JobAttempt.from_proto(a) for a in resp.attempts)
            token = resp.next_page_token
            if not token:
                return out

    def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Lists live dispatchers of ``region`` ("" = the API's own region).

        Raises:
            GnomonError: when the RPC fails.
        """
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

    def get_queue(self, queue: str) -> Queue:
        """Reads a queue's health: circuit breaker state, retry budget, due backlog. ``queue`` is a
        queue id of this client's namespace or ``namespaces/{ns}/queues/{queue}``.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` for a malformed name, ``UNAVAILABLE``, ...
            ValueError: an empty or malformed name.
        """
        req = queue_service_pb2.GetQueueRequest(name=queue_name(queue, self.namespace))
        return Queue.from_proto(self._call(self._queues.GetQueue, req).queue)

    def set_queue_rate_limit(self, queue: str, rate: float, burst: int = 0) -> Queue:
        """Sets the queue's dispatch rate limit (``rate`` dispatches per second shared by all
        dispatchers of the region, ``burst`` at once; 0 = rate rounded up); ``rate=0`` removes it.
        Returns the queue afterwards. Raises :class:`GnomonError` (``INVALID_ARGUMENT`` ...)."""
        req = queue_service_pb2.SetQueueRateLimitRequest(
            name=queue_name(queue, self.namespace), rate=rate, burst=burst
        )
        return Queue.from_proto(self._call(self._queues.SetQueueRateLimit, req).queue)

    # -- dead-letter queue (gnomon.v1.DeadLetterService; models in gnomon.sdk.dead_letters) --

    def list_dead_letters_page(
        self,
        *,
        queue: str | None = None,
        failure_class: str | None = None,
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
            queue: only this queue. failure_class: only this class of last failure (e.g.
                ``"PERMANENT"``). error_contains: only those whose last error contains this text
                (case-insensitive). start_time / end_time: aware datetimes, finish time in
                ``[start_time, end_time)``. include_replayed: also those replayed already.
            page_size: 1-1000. page_token: from the previous page (other arguments unchanged).

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (field violations), ``PERMISSION_DENIED``, ...
        """
        req = _dlq.list_dead_letters_request(
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
        resp = _dlq.call(self, "ListDeadLetters", req)
        return [DeadLetter.from_proto(d) for d in resp.dead_letters], resp.next_page_token

    def list_dead_letters(self, *, page_size: int = 100, **filters) -> Iterator[DeadLetter]:
        """Iterates over all matching dead letters (filters as :meth:`list_dead_letters_page`),
        fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_dead_letters_page(page_size=page_size, page_token=token, **filters)
            yield from items
            if not token:
                return

    def replay_dead_letters(
        self,
        *,
        max_rate: float,
        max_jobs: int,
        reason: str,
        queue: str | None = None,
        failure_class: str | None = None,
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
        DEAD and point at their replays (``replayed_by``). Audited (``reason``, this client's
        ``x-gnomon-actor`` metadata and address).

        Args:
            max_rate: jobs per second, 0 < max_rate <= 1000.
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
        req = _dlq.replay_dead_letters_request(
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
        return _dlq.replay_result(_dlq.call(self, "ReplayDeadLetters", req, timeout), req.request_id)

    def list_audit_entries_page(
        self, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[AuditEntry], str]:
        """One page of this namespace's audit log (DLQ replays and dry runs), newest first:
        ``(entries, next_page_token)``.

        Raises:
            GnomonError: when the RPC fails.
        """
        req = _dlq.list_audit_entries_request(self.namespace, page_size, page_token)
        resp = _dlq.call(self, "ListAuditEntries", req)
        return [AuditEntry.from_proto(e) for e in resp.audit_entries], resp.next_page_token

    def list_audit_entries(self, page_size: int = 100) -> Iterator[AuditEntry]:
        """Iterates over the whole audit log of this namespace, newest first, fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_audit_entries_page(page_size, token)
            yield from items
            if not token:
                return

    # -- recurring schedules (gnomon.v1.ScheduleService; plain protobuf messages) --

    def create_schedule(
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
    ) -> schedule_pb2.Schedule:
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
        return self._call(self._schedules.CreateSchedule, req).schedule

    def get_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Reads a schedule by full name or bare id (this client's namespace).

        Raises:
            GnomonError: ``NOT_FOUND`` (``SCHEDULE_NOT_FOUND``). ValueError: a malformed name.
        """
        req = schedule_service_pb2.GetScheduleRequest(name=schedule_name(name, self.namespace))
        return self._call(self._schedules.GetSchedule, req).schedule

    def list_schedules_page(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[schedule_pb2.Schedule], str]:
        """One page of schedules ordered by id: ``(schedules, next_page_token)`` ("" on the last page).
        ``paused``: True only paused, False only active, None any; ``queue``: only this queue."""
        resp = self._call(
            self._schedules.ListSchedules,
            list_schedules_request(self.namespace, paused, queue, page_size, page_token),
        )
        return list(resp.schedules), resp.next_page_token

    def list_schedules(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100
    ) -> Iterator[schedule_pb2.Schedule]:
        """Iterates over all matching schedules, fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_schedules_page(paused, queue, page_size, token)
            yield from items
            if not token:
                return

    def update_schedule(self, name: str, etag: str | None = None, **fields: Any) -> schedule_pb2.Schedule:
        """Changes the given fields only (the ``update_mask`` names exactly them); returns the schedule.

        ``fields``: any of :data:`SCHEDULE_FIELDS` (``cron``/``rrule``/``every`` replace the rule;
        ``None`` resets a field to its default / clears it) and of :data:`TEMPLATE_FIELDS` (``queue``,
        ``payload``, ``max_attempts`` ...: the current template is read first and only those change).
        ``etag``: update only if the schedule is still at it.

        Raises:
            GnomonError: ``INVALID_ARGUMENT``, ``NOT_FOUND``, ``FAILED_PRECONDITION`` (``STALE_VERSION``).
            TypeError, ValueError: unknown field, nothing to update, two rules, unknown policy.
        """
        current = self.get_schedule(name) if any(k in TEMPLATE_FIELDS for k in fields) else None
        req = update_schedule_request(name, self.namespace, etag, current, **fields)
        return self._call(self._schedules.UpdateSchedule, req).schedule

    def delete_schedule(self, name: str, etag: str | None = None) -> int:
        """Deletes a schedule (and its not-yet-dispatched future occurrence jobs); returns how many
        such jobs were withdrawn.

        Raises:
            GnomonError: ``NOT_FOUND``, ``FAILED_PRECONDITION`` (``STALE_VERSION``).
        """
        req = schedule_service_pb2.DeleteScheduleRequest(
            name=schedule_name(name, self.namespace), etag=etag or ""
        )
        return self._call(self._schedules.DeleteSchedule, req).withdrawn_jobs

    def pause_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Pauses a schedule (idempotent); returns it."""
        req = schedule_service_pb2.PauseScheduleRequest(name=schedule_name(name, self.namespace))
        return self._call(self._schedules.PauseSchedule, req).schedule

    def resume_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Resumes a schedule (idempotent; times missed while paused are SKIPPED_PAUSED); returns it."""
        req = schedule_service_pb2.ResumeScheduleRequest(name=schedule_name(name, self.namespace))
        return self._call(self._schedules.ResumeSchedule, req).schedule

    def trigger_schedule(
        self, name: str, overlap_policy: str | int | None = None, request_id: str | uuid.UUID | None = None
    ) -> tuple[schedule_pb2.ScheduleOccurrence, Job | None]:
        """Runs the schedule now as an extra occurrence: ``(occurrence, job or None)`` (no job when
        it was BUFFERED or SKIPPED_OVERLAP). ``overlap_policy`` overrides the schedule's for this run."""
        req = schedule_service_pb2.TriggerScheduleRequest(
            name=schedule_name(name, self.namespace),
            overlap_policy=overlap_value(overlap_policy),
            request_id=str(request_id) if request_id is not None else "",
        )
        resp = self._call(self._schedules.TriggerSchedule, req)
        return resp.occurrence, (Job.from_proto(resp.job) if resp.HasField("job") else None)

    def backfill_schedule(
        self, name: str, start: datetime, end: datetime, overlap_policy: str | int | None = None
    ) -> list[schedule_pb2.ScheduleOccurrence]:
        """Plans the rule's nominal times in ``[start, end)`` again as BACKFILL occurrences; returns
        one record per nominal time (BUFFERED, DEDUPLICATED or SKIPPED_DST_GAP)."""
        req = backfill_schedule_request(name, self.namespace, start, end, overlap_policy)
        return list(self._call(self._schedules.BackfillSchedule, req).occurrences)

    def preview_schedule(
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
    ) -> list[schedule_pb2.PreviewFireTime]:
        """The next ``count`` fire times strictly after ``from_time`` (default: now) of the saved
        schedule ``name`` or of an unsaved rule (one of ``cron``/``rrule``/``every``); skipped
        nominal times (DST gap) are interleaved with ``skipped`` set. See :func:`fire_time_dict`.

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
        return list(self._call(self._schedules.PreviewSchedule, req).fire_times)

    def list_schedule_occurrences_page(
        self, name: str, decision: str | int | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[schedule_pb2.ScheduleOccurrence], str]:
        """One page of a schedule's decision records, newest nominal time first."""
        req = list_occurrences_request(name, self.namespace, decision, page_size, page_token)
        resp = self._call(self._schedules.ListScheduleOccurrences, req)
        return list(resp.occurrences), resp.next_page_token

    def list_schedule_occurrences(
        self, name: str, decision: str | int | None = None, page_size: int = 100
    ) -> Iterator[schedule_pb2.ScheduleOccurrence]:
        """Iterates over a schedule's decision records (newest first; ``decision`` e.g.
        ``"SKIPPED_OVERLAP"``), fetching pages lazily."""
        token = ""
        while True:
            items, token = self.list_schedule_occurrences_page(name, decision, page_size, token)
            yield from items
            if not token:
                return

    def close(self) -> None:
        """Closes the channel. Idempotent."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def list_shards(self, region: str = "") -> list[dict]:
        """Every shard of ``region`` ("" = the API's own region) with its owner and tokens, as dicts
        (see :func:`shard_dict`).

        Raises:
            GnomonError: when the RPC fails.
        """
        resp = self._call(self._cluster.ListShards, cluster_service_pb2.ListShardsRequest(region=region))
        return [shard_dict(s) for s in resp.shards]


class AsyncClient:
    """Asynchronous (``grpc.aio``) twin of :class:`Client`: same arguments, same methods, but
    every method is a coroutine, :meth:`list_jobs` is an async iterator, and :meth:`close` must be
    awaited. Use ``async with AsyncClient(...) as c:``. Create it inside a running event loop.
    """

    def __init__(
        self,
        api: str = DEFAULT_API,
        namespace: str = "default",
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace.removeprefix("namespaces/")
        self.timeout = timeout
        self._metadata = tuple(metadata or ())
        opts = list(channel_options or ())
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(api, options=opts)
        else:
            self._channel = grpc.aio.secure_channel(api, credentials, options=opts)
        self._jobs = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_service_pb2_grpc.ClusterServiceStub(self._channel)
        self._queues = queue_service_pb2_grpc.QueueServiceStub(self._channel)
        self._schedules = schedule_service_pb2_grpc.ScheduleServiceStub(self._channel)

    async def _call(self, method, request):
        try:
            return await method(request, timeout=self.timeout, metadata=self._metadata or None)
        except grpc.RpcError as err:
            raise GnomonError.from_rpc_error(err) from None

    async def create_job(
        self,
        queue: str,
        payload: Payload = b"",
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        deadline: datetime | None = None,
        max_attempts: int | None = None,
        request_id: str | uuid.UUID | None = None,
        idempotency_key: str | None = None,
        lease_duration: Span | None = None,
        idempotent: bool = False,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        start_to_close: Span | None = None,
    ) -> Job:
        """Async :meth:`Client.create_job`."""
        req = create_job_request(
            self.namespace,
            queue,
            payload,
            schedule_time=schedule_time,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            request_id=request_id,
            idempotency_key=idempotency_key,
            lease_duration=lease_duration,
            idempotent=idempotent,
            retry_policy=retry_policy,
            start_to_close=start_to_close,
        )
        return Job.from_proto((await self._call(self._jobs.CreateJob, req)).job)

    async def get_job(self, name: str) -> Job:
        """Async :meth:`Client.get_job`."""
        req = job_service_pb2.GetJobRequest(name=convert.job_name(name, self.namespace))
        return Job.from_proto((await self._call(self._jobs.GetJob, req)).job)

    async def list_jobs_page(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> tuple[list[Job], str]:
        """Async :meth:`Client.list_jobs_page`."""
        req = list_jobs_request(self.namespace, state, queue, page_size, page_token)
        resp = await self._call(self._jobs.ListJobs, req)
        return [Job.from_proto(j) for j in resp.jobs], resp.next_page_token

    async def list_jobs(
        self,
        state: str | int | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """Async iterator over all matching jobs (``async for job in c.list_jobs(...)``)."""
        token = ""
        while True:
            jobs, token = await self.list_jobs_page(state, queue, page_size, token)
            for job in jobs:
                yield job
            if not token:
                return

    async def cancel_job(self, name: str, expected_version: int | None = None) -> tuple[str, Job]:
        """Async :meth:`Client.cancel_job`."""
        req = cancel_job_request(name, self.namespace, expected_version)
        resp = await self._call(self._jobs.CancelJob, req)
        return _outcome(resp.outcome), Job.from_proto(resp.job)

    async def reschedule_job(
        self,
        name: str,
        *,
        schedule_time: datetime | None = None,
        delay: Span | None = None,
        expected_version: int | None = None,
    ) -> Job:
        """Async :meth:`Client.reschedule_job`."""
        req = reschedule_job_request(
            name, self.namespace, schedule_time=schedule_time, delay=delay, expected_version=expected_version
        )
        return Job.from_proto((await self._call(self._jobs.RescheduleJob, req)).job)

    async def list_job_attempts(self, name: str, page_size: int = 100) -> list[JobAttempt]:
        """Async :meth:`Client.list_job_attempts`."""
        parent, token, out = convert.job_name(name, self.namespace), "", []
        while True:
            req = job_service_pb2.ListJobAttemptsRequest(
                parent=parent, page_size=int(page_size), page_token=token
            )
            resp = await self._call(self._jobs.ListJobAttempts, req)
            out.extend(JobAttempt.from_proto(a) for a in resp.attempts)
            token = resp.next_page_token
            if not token:
                return out

    async def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Async :meth:`Client.list_dispatchers`."""
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = await self._call(self._cluster.ListDispatchers, req)
        return [DispatcherInfo.from_proto(d) for d in resp.dispatchers]

    async def get_queue(self, queue: str) -> Queue:
        """Async :meth:`Client.get_queue`."""
        req = queue_service_pb2.GetQueueRequest(name=queue_name(queue, self.namespace))
        return Queue.from_proto((await self._call(self._queues.GetQueue, req)).queue)

    async def set_queue_rate_limit(self, queue: str, rate: float, burst: int = 0) -> Queue:
        """Async :meth:`Client.set_queue_rate_limit`."""
        req = queue_service_pb2.SetQueueRateLimitRequest(
            name=queue_name(queue, self.namespace), rate=rate, burst=burst
        )
        return Queue.from_proto((await self._call(self._queues.SetQueueRateLimit, req)).queue)

    # -- dead-letter queue (see Client) --

    async def list_dead_letters_page(
        self, *, page_size: int = 100, page_token: str = "", **filters
    ) -> tuple[list[DeadLetter], str]:
        """Async :meth:`Client.list_dead_letters_page`."""
        req = _dlq.list_dead_letters_request(
            self.namespace, page_size=page_size, page_token=page_token, **filters
        )
        resp = await _dlq.acall(self, "ListDeadLetters", req)
        return [DeadLetter.from_proto(d) for d in resp.dead_letters], resp.next_page_token

    async def list_dead_letters(self, *, page_size: int = 100, **filters) -> AsyncIterator[DeadLetter]:
        """Async iterator over all matching dead letters."""
        token = ""
        while True:
            items, token = await self.list_dead_letters_page(page_size=page_size, page_token=token, **filters)
            for item in items:
                yield item
            if not token:
                return

    async def replay_dead_letters(
        self, *, max_rate: float, max_jobs: int, reason: str, timeout: float | None = None, **kwargs
    ) -> ReplayResult:
        """Async :meth:`Client.replay_dead_letters`."""
        req = _dlq.replay_dead_letters_request(
            self.namespace, max_rate=max_rate, max_jobs=max_jobs, reason=reason, **kwargs
        )
        return _dlq.replay_result(await _dlq.acall(self, "ReplayDeadLetters", req, timeout), req.request_id)

    async def list_audit_entries_page(
        self, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[AuditEntry], str]:
        """Async :meth:`Client.list_audit_entries_page`."""
        req = _dlq.list_audit_entries_request(self.namespace, page_size, page_token)
        resp = await _dlq.acall(self, "ListAuditEntries", req)
        return [AuditEntry.from_proto(e) for e in resp.audit_entries], resp.next_page_token

    # -- recurring schedules (see Client) --

    async def create_schedule(self, queue: str, **kwargs: Any) -> schedule_pb2.Schedule:
        """Async :meth:`Client.create_schedule` (same keyword arguments)."""
        req = create_schedule_request(self.namespace, queue, **kwargs)
        return (await self._call(self._schedules.CreateSchedule, req)).schedule

    async def get_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Async :meth:`Client.get_schedule`."""
        req = schedule_service_pb2.GetScheduleRequest(name=schedule_name(name, self.namespace))
        return (await self._call(self._schedules.GetSchedule, req)).schedule

    async def list_schedules_page(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[schedule_pb2.Schedule], str]:
        """Async :meth:`Client.list_schedules_page`."""
        resp = await self._call(
            self._schedules.ListSchedules,
            list_schedules_request(self.namespace, paused, queue, page_size, page_token),
        )
        return list(resp.schedules), resp.next_page_token

    async def list_schedules(
        self, paused: bool | None = None, queue: str | None = None, page_size: int = 100
    ) -> AsyncIterator[schedule_pb2.Schedule]:
        """Async iterator over all matching schedules."""
        token = ""
        while True:
            items, token = await self.list_schedules_page(paused, queue, page_size, token)
            for item in items:
                yield item
            if not token:
                return

    async def update_schedule(
        self, name: str, etag: str | None = None, **fields: Any
    ) -> schedule_pb2.Schedule:
        """Async :meth:`Client.update_schedule`."""
        current = await self.get_schedule(name) if any(k in TEMPLATE_FIELDS for k in fields) else None
        req = update_schedule_request(name, self.namespace, etag, current, **fields)
        return (await self._call(self._schedules.UpdateSchedule, req)).schedule

    async def delete_schedule(self, name: str, etag: str | None = None) -> int:
        """Async :meth:`Client.delete_schedule`."""
        req = schedule_service_pb2.DeleteScheduleRequest(
            name=schedule_name(name, self.namespace), etag=etag or ""
        )
        return (await self._call(self._schedules.DeleteSchedule, req)).withdrawn_jobs

    async def pause_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Async :meth:`Client.pause_schedule`."""
        req = schedule_service_pb2.PauseScheduleRequest(name=schedule_name(name, self.namespace))
        return (await self._call(self._schedules.PauseSchedule, req)).schedule

    async def resume_schedule(self, name: str) -> schedule_pb2.Schedule:
        """Async :meth:`Client.resume_schedule`."""
        req = schedule_service_pb2.ResumeScheduleRequest(name=schedule_name(name, self.namespace))
        return (await self._call(self._schedules.ResumeSchedule, req)).schedule

    async def trigger_schedule(
        self, name: str, overlap_policy: str | int | None = None, request_id: str | uuid.UUID | None = None
    ) -> tuple[schedule_pb2.ScheduleOccurrence, Job | None]:
        """Async :meth:`Client.trigger_schedule`."""
        req = schedule_service_pb2.TriggerScheduleRequest(
            name=schedule_name(name, self.namespace),
            overlap_policy=overlap_value(overlap_policy),
            request_id=str(request_id) if request_id is not None else "",
        )
        resp = await self._call(self._schedules.TriggerSchedule, req)
        return resp.occurrence, (Job.from_proto(resp.job) if resp.HasField("job") else None)

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime, overlap_policy: str | int | None = None
    ) -> list[schedule_pb2.ScheduleOccurrence]:
        """Async :meth:`Client.backfill_schedule`."""
        req = backfill_schedule_request(name, self.namespace, start, end, overlap_policy)
        return list((await self._call(self._schedules.BackfillSchedule, req)).occurrences)

    async def preview_schedule(self, **kwargs: Any) -> list[schedule_pb2.PreviewFireTime]:
        """Async :meth:`Client.preview_schedule` (same keyword arguments)."""
        req = preview_schedule_request(self.namespace, **kwargs)
        return list((await self._call(self._schedules.PreviewSchedule, req)).fire_times)

    async def list_schedule_occurrences_page(
        self, name: str, decision: str | int | None = None, page_size: int = 100, page_token: str = ""
    ) -> tuple[list[schedule_pb2.ScheduleOccurrence], str]:
        """Async :meth:`Client.list_schedule_occurrences_page`."""
        req = list_occurrences_request(name, self.namespace, decision, page_size, page_token)
        resp = await self._call(self._schedules.ListScheduleOccurrences, req)
        return list(resp.occurrences), resp.next_page_token

    async def list_schedule_occurrences(
        self, name: str, decision: str | int | None = None, page_size: int = 100
    ) -> AsyncIterator[schedule_pb2.ScheduleOccurrence]:
        """Async iterator over a schedule's decision records (newest first)."""
        token = ""
        while True:
            items, token = await self.list_schedule_occurrences_page(name, decision, page_size, token)
            for item in items:
                yield item
            if not token:
                return

    async def close(self) -> None:
        """Closes the channel. Idempotent."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def list_shards(self, region: str = "") -> list[dict]:
        """Async :meth:`Client.list_shards`."""
        resp = await self._call(
            self._cluster.ListShards, cluster_service_pb2.ListShardsRequest(region=region)
        )
        return [shard_dict(s) for s in resp.shards]


def shard_dict(s: cluster_service_pb2.Shard) -> dict:
    """A ``Shard`` message as ``{region, shard, owner, fencing_token, recorded_token, owned, acquire_time}``
    (``acquire_time``: a UTC datetime or ``None``)."""
    return {
        "region": s.region,
        "shard": s.shard,
        "owner": s.owner,
        "fencing_token": s.fencing_token,
        "recorded_token": s.recorded_token,
        "owned": s.owned,
        "acquire_time": s.acquire_time.ToDatetime(tzinfo=UTC) if s.HasField("acquire_time") else None,
    }
