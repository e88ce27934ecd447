"""Validation of schedule requests: every rule is a field violation, all reported at once; a rule the
recurrence engine refuses adds its own reason (INVALID_CRON, INVALID_RRULE, INVALID_TIME_ZONE,
RULE_NEVER_FIRES, ...) to the ``ErrorInfo``. Limits are in docs/schedules.md.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon.api.validation import _duration, _timestamp, job_fields, request_fingerprint
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import FieldViolation, InvalidArgument, Validator
from gnomon.common.names import parse_parent
from gnomon.common.storage import schedules as store
from gnomon.common.time import DstFold, DstGap, RuleError, RuleKind, RuleSpec, compile_rule

SCHEDULE_ID_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
MAX_GRACE = timedelta(days=1)
MIN_WINDOW, MAX_WINDOW = timedelta(minutes=1), timedelta(days=366)
MAX_CATCHUP = 1000
MAX_JITTER = timedelta(hours=1)
MAX_INTERVAL = timedelta(days=366)
#: Instants of rules (start/end, preview and backfill times) stay in 1970 .. 9000, so every bounded
#: search (50 years either way) stays inside what Python datetimes can represent.
MIN_RULE_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_RULE_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)

_GAP = {
    schedule_pb2.DST_GAP_POLICY_UNSPECIFIED: DstGap.SHIFT_FORWARD,
    schedule_pb2.DST_GAP_POLICY_SHIFT_FORWARD: DstGap.SHIFT_FORWARD,
    schedule_pb2.DST_GAP_POLICY_SKIP: DstGap.SKIP,
}
_FOLD = {
    schedule_pb2.DST_FOLD_POLICY_UNSPECIFIED: DstFold.FIRST,
    schedule_pb2.DST_FOLD_POLICY_FIRST: DstFold.FIRST,
    schedule_pb2.DST_FOLD_POLICY_SECOND: DstFold.SECOND,
    schedule_pb2.DST_FOLD_POLICY_BOTH: DstFold.BOTH,
}
_MISFIRE = {
    0: store.DEFAULT_MISFIRE,
    **{v: n.removeprefix("MISFIRE_POLICY_") for n, v in schedule_pb2.MisfirePolicy.items() if v},
}
_OVERLAP = {
    0: store.DEFAULT_OVERLAP,
    **{v: n.removeprefix("OVERLAP_POLICY_") for n, v in schedule_pb2.OverlapPolicy.items() if v},
}


def parse_request_id(v: Validator, text: str, field: str = "request_id") -> uuid.UUID | None:
    """An optional AIP-155 request id: empty -> None; not a canonical UUID -> violation on ``field``."""
    if not text:
        return None
    try:
        rid = uuid.UUID(text)
        if str(rid) == text.lower():
            return rid
    except ValueError:
        pass
    v.add(field, "must be a UUID in its canonical 8-4-4-4-12 form (AIP-155)")
    return None


def _enum(v: Validator, table: dict, value: int, field: str) -> str | None:
    if value not in table:
        v.add(field, f"unknown value {value}")
        return None
    return table[value]


def rule_instant(v: Validator, msg, field: str) -> datetime | None:
    """A Timestamp used by a rule (start_time, end_time, from_time, backfill range): a valid instant
    between 1970-01-01 and 9000-01-01 (UTC), else a violation on ``field`` and None."""
    t = _timestamp(v, msg, field)
    if t is not None and not (MIN_RULE_INSTANT <= t <= MAX_RULE_INSTANT):
        v.add(field, "must be between 1970-01-01T00:00:00Z and 9000-01-01T00:00:00Z")
        return None
    return t


def overlap_of(v: Validator, value: int, field: str, default: str) -> str:
    """An OverlapPolicy enum value -> its name (unspecified -> ``default``); unknown -> violation."""
    if value == 0:
        return default
    return _enum(v, _OVERLAP, value, field) or default


def rule_fields(v: Validator, msg, prefix: str) -> tuple[str, str, timedelta | None]:
    """The rule oneof of a Schedule or PreviewRule -> ``(kind, expression, interval)``."""
    which = msg.WhichOneof("rule")
    if which is None:
        v.add(f"{prefix}cron", "give exactly one rule: cron, rrule or interval")
        return "CRON", "", None
    if which == "interval":
        d = _duration(v, msg.interval, f"{prefix}interval", timedelta(seconds=1), MAX_INTERVAL)
        return "INTERVAL", "", d
    text = getattr(msg, which)
    if not text.strip():
        v.add(f"{prefix}{which}", "must not be empty")
    elif len(text) > 20_000:
        v.add(f"{prefix}{which}", "is longer than 20000 characters")
    return which.upper(), text.strip(), None


def compile_spec(v: Validator, spec: RuleSpec, prefix: str) -> tuple[object | None, str | None]:
    """Compiles ``spec``; a refusal becomes a violation on ``{prefix}{field}``. Returns
    ``(recurrence or None, rule error reason or None)``."""
    try:
        return compile_rule(spec), None
    except RuleError as e:
        v.add(f"{prefix}{e.field}", e.message)
        return None, e.reason


def _raise(v: Validator, reason: str | None) -> None:
    v.raise_if_any(reason=reason if reason else None)


def schedule_values(
    v: Validator, msg: schedule_pb2.Schedule, prefix: str = "schedule."
) -> store.ScheduleValues | None:
    """Validates every settable field of ``msg`` (violations named ``{prefix}field``) and returns the
    values with defaults filled in; None when there were violations."""
    n0 = len(v.violations)
    kind, expression, interval = rule_fields(v, msg, prefix)
    tz = msg.time_zone or "UTC"
    gap = _enum(v, _GAP, msg.dst_gap, f"{prefix}dst_gap")
    fold = _enum(v, _FOLD, msg.dst_fold, f"{prefix}dst_fold")
    misfire = _enum(v, _MISFIRE, msg.misfire_policy, f"{prefix}misfire_policy")
    overlap = _enum(v, _OVERLAP, msg.overlap_policy, f"{prefix}overlap_policy")
    grace: timedelta | None = store.DEFAULT_GRACE
    if msg.HasField("misfire_grace"):
        grace = _duration(v, msg.misfire_grace, f"{prefix}misfire_grace", timedelta(0), MAX_GRACE)
    window: timedelta | None = store.DEFAULT_CATCHUP_WINDOW
    if msg.HasField("catchup_window"):
        window = _duration(v, msg.catchup_window, f"{prefix}catchup_window", MIN_WINDOW, MAX_WINDOW)
    max_catchup = msg.max_catchup or store.DEFAULT_MAX_CATCHUP
    v.check(
        1 <= max_catchup <= MAX_CATCHUP,
        f"{prefix}max_catchup",
        f"must be between 1 and {MAX_CATCHUP} (0 = 100)",
    )
    start = rule_instant(v, msg.start_time, f"{prefix}start_time") if msg.HasField("start_time") else None
    end = rule_instant(v, msg.end_time, f"{prefix}end_time") if msg.HasField("end_time") else None
    jitter = timedelta(0)
    if msg.HasField("jitter"):
        jitter = _duration(v, msg.jitter, f"{prefix}jitter", timedelta(0), MAX_JITTER) or timedelta(0)
    t = msg.job_template
    tp = f"{prefix}job_template."
    f = job_fields(v, t, tp)
    sdl = (
        _duration(v, t.start_deadline, f"{tp}start_deadline", timedelta(seconds=1), timedelta(days=366))
        if t.HasField("start_deadline")
        else None
    )
    if len(v.violations) > n0:
        return None
    # no violation: every enum and duration above was valid (the checks narrow their types)
    if gap is None or fold is None or misfire is None or overlap is None or grace is None or window is None:
        return None
    return store.ScheduleValues(
        rule_kind=kind,
        expression=expression,
        interval=interval,
        time_zone=tz,
        dst_gap=gap,
        dst_fold=fold,
        start_time=start,
        end_time=end,
        misfire_policy=misfire,
        misfire_grace=grace,
        catchup_window=window,
        max_catchup=max_catchup,
        overlap_policy=overlap,
        jitter=jitter,
        queue=f.queue,
        payload=f.payload,
        max_attempts=f.max_attempts,
        lease=f.lease,
        idempotent=t.idempotent,
        start_to_close=f.start_to_close,
        start_deadline=sdl,
        retry=f.retry,
    )


def check_rule(values: store.ScheduleValues, prefix: str = "schedule.") -> None:
    """Compiles the rule of ``values``; raises :class:`InvalidArgument` with the rule's reason
    (INVALID_TIME_RANGE when ``end_time`` is not after ``start_time``)."""
    v = Validator()
    _, reason = _check_values(v, values, prefix)
    _raise(v, reason)


def _check_values(v: Validator, values: store.ScheduleValues, prefix: str):
    if values.start_time is not None and values.end_time is not None and values.end_time <= values.start_time:
        v.add(f"{prefix}end_time", "must be after start_time")
        return None, "INVALID_TIME_RANGE"
    return compile_spec(v, values.spec(), prefix)


def validate_create(req, *, region: str) -> store.NewSchedule:
    """A CreateScheduleRequest -> :class:`NewSchedule`. Raises :class:`InvalidArgument` (nothing written)."""
    v = Validator()
    try:
        namespace = parse_parent(req.parent)
    except InvalidArgument as e:
        v.violations += e.violations
        namespace = ""
    sid = req.schedule_id
    if sid:
        v.check(
            bool(SCHEDULE_ID_RE.fullmatch(sid)),
            "schedule_id",
            "must be 1-63 characters of [a-z0-9-], starting with a letter, not ending with '-'",
        )
    request_id = parse_request_id(v, req.request_id)
    if not req.HasField("schedule"):
        v.add("schedule", "is required")
        v.raise_if_any()
    values = schedule_values(v, req.schedule)
    reason = None
    if values is not None:
        _, reason = _check_values(v, values, "schedule.")
        values = store.ScheduleValues(**{**values.__dict__, "paused": req.schedule.paused})
    _raise(v, reason)
    assert values is not None  # None only with violations, raised above
    return store.NewSchedule(
        namespace=namespace,
        schedule_id=sid or str(uuid.uuid4()),
        region=region,
        values=values,
        request_id=request_id,
        request_hash=request_fingerprint(req) if request_id else None,
    )


def preview_spec(msg) -> RuleSpec:
    """A PreviewRule -> :class:`RuleSpec` (violations named ``rule.<field>``), compiled to check it."""
    v = Validator()
    kind, expression, interval = rule_fields(v, msg, "rule.")
    gap = _enum(v, _GAP, msg.dst_gap, "rule.dst_gap")
    fold = _enum(v, _FOLD, msg.dst_fold, "rule.dst_fold")
    start = rule_instant(v, msg.start_time, "rule.start_time") if msg.HasField("start_time") else None
    end = rule_instant(v, msg.end_time, "rule.end_time") if msg.HasField("end_time") else None
    v.raise_if_any()
    assert gap is not None and fold is not None  # None only with violations, raised above
    if start is not None and end is not None and end <= start:
        raise InvalidArgument(
            [FieldViolation("rule.end_time", "must be after start_time")],
            reason=ErrorReason.INVALID_TIME_RANGE,
        )
    spec = RuleSpec(
        kind=RuleKind(kind),
        expression=expression,
        interval=interval,
        time_zone=msg.time_zone or "UTC",
        start=start,
        end=end,
        dst_gap=DstGap(gap),
        dst_fold=DstFold(fold),
    )
    _, reason = compile_spec(v, spec, "rule.")
    _raise(v, reason)
    return spec


def violation(field: str, description: str) -> InvalidArgument:
    """A one-violation :class:`InvalidArgument`."""
    return InvalidArgument([FieldViolation(field, description)])
