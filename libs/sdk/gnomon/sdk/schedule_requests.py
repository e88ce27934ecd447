"""Request builders of the schedule methods (``gnomon.v1.ScheduleService``): policies given by name,
rules, masks of partial updates. Pure functions of their arguments (no I/O)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar, cast

from google.protobuf import field_mask_pb2
from google.protobuf.message import Message

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2

from . import convert
from .base import Payload, Span
from .convert import EnumType
from .models import RetryPolicy

__all__ = [
    "TEMPLATE_FIELDS",
    "SCHEDULE_FIELDS",
    "enum_value",
    "misfire_value",
    "overlap_value",
    "dst_gap_value",
    "dst_fold_value",
    "decision_value",
    "schedule_name",
    "create_schedule_request",
    "update_schedule_request",
    "list_schedules_request",
    "backfill_schedule_request",
    "preview_schedule_request",
    "list_occurrences_request",
]


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


def enum_value(enum_type: EnumType, prefix: str, value: str | int | None, what: str) -> int:
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


E = TypeVar("E", bound=int)


def _parser(enum_type: type[E], prefix: str, what: str) -> Callable[[str | int | None], E]:
    def parse(v: str | int | None) -> E:
        return cast(E, enum_value(cast(EnumType, enum_type), prefix, v, what))

    parse.__doc__ = f"""A {what} by short name, full name (``{prefix}...``) or number -> its enum number
    (``None``/``""`` -> 0, the server default; see :func:`enum_value`).

    Raises:
        ValueError: an unknown name or number.
    """
    return parse


misfire_value = _parser(schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_", "misfire policy")
overlap_value = _parser(schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_", "overlap policy")
dst_gap_value = _parser(schedule_pb2.DstGapPolicy, "DST_GAP_POLICY_", "DST gap policy")
dst_fold_value = _parser(schedule_pb2.DstFoldPolicy, "DST_FOLD_POLICY_", "DST fold policy")
decision_value = _parser(schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_", "decision")


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


def _set_rule(
    msg: schedule_pb2.Schedule | schedule_service_pb2.PreviewRule,
    cron: str | None,
    rrule: str | None,
    every: Span | None,
    *,
    required: bool,
) -> None:
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
        assert every is not None
        msg.interval.CopyFrom(convert.to_duration(every))


def _set_time(msg: Message, field: str, value: datetime | None) -> None:
    if value is None:
        msg.ClearField(field)
    else:
        getattr(msg, field).CopyFrom(convert.to_timestamp(value))


def _set_span(msg: Message, field: str, value: Span | None) -> None:
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
                tpl.retry_policy.CopyFrom(convert.retry_policy_to_proto(v))
        elif k in ("lease_duration", "start_to_close", "start_deadline"):
            _set_span(tpl, k, v)
        else:
            raise TypeError(f"unknown job template field {k!r}")


def _set_schedule_field(msg: schedule_pb2.Schedule, k: str, v: Any) -> None:
    """Sets schedule field ``k`` (one of :data:`SCHEDULE_FIELDS` but the rule) to ``v`` on ``msg``.
    Raises TypeError for an unknown field, ValueError for an unknown policy name."""
    if k == "time_zone":
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
            f"unknown schedule field {k!r}; expected one of {', '.join(SCHEDULE_FIELDS + TEMPLATE_FIELDS)}"
        )


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
        else:
            _set_schedule_field(msg, k, v)
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


def simulate_outage_request(
    start: datetime,
    end: datetime,
    *,
    name: str | None,
    namespace: str,
    assume_active: int = 0,
    page_size: int = 0,
    page_token: str = "",
    max_runs: int = 0,
) -> schedule_service_pb2.SimulateOutageRequest:
    """Builds a ``SimulateOutageRequest`` for the outage ``start`` .. ``end`` (aware datetimes): of the
    schedule ``name`` (an id or a full name), else of every schedule of ``namespace``.

    Raises:
        TypeError: naive datetimes. ValueError: a malformed name.
    """
    return schedule_service_pb2.SimulateOutageRequest(
        name=schedule_name(name, namespace) if name else "",
        parent="" if name else convert.namespace_parent(namespace),
        outage_start_time=convert.to_timestamp(start),
        outage_end_time=convert.to_timestamp(end),
        assume_active=assume_active,
        page_size=page_size,
        page_token=page_token,
        max_runs=max_runs,
    )
