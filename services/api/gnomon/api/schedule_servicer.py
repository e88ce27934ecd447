"""``gnomon.v1.ScheduleService``: a thin adapter. Each handler validates and converts the request,
makes one call into the schedule engine (:class:`gnomon.common.scheduling.engine.ScheduleEngine`:
one transaction per write, nothing written for a refused request, hints to the planner and
dispatchers after a change) and converts the result. Page tokens: :mod:`gnomon.common.pagination`;
names: :mod:`gnomon.common.names`."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2_grpc
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.api.convert import job_to_proto, occurrence_to_proto, prediction_to_proto, schedule_to_proto
from gnomon.api.quotas import QuotaGuard
from gnomon.api.schedule_validation import (
    check_rule,
    overlap_of,
    parse_request_id,
    preview_spec,
    rule_instant,
    schedule_values,
    validate_create,
    violation,
)
from gnomon.common import pagination, tracing
from gnomon.common.config import REPLY_BUDGET_BYTES
from gnomon.common.coordination.hints import DispatcherHints, PlannerHints
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import FieldViolation, InvalidArgument, Validator
from gnomon.common.names import QUEUE_RE, parse_parent, parse_schedule_name, schedule_name
from gnomon.common.rpc.admission import current_admit
from gnomon.common.scheduling.engine import ScheduleEngine
from gnomon.common.storage.schedules import ScheduleValues
from gnomon.common.time import RuleError, tzdata_version
from gnomon.common.timeconv import to_timestamp

MAX_PREVIEW, DEFAULT_PREVIEW = 1000, 10
#: SimulateOutage: schedules per page, runs listed per schedule, active occurrences assumed.
MAX_SIMULATE_PAGE, DEFAULT_SIMULATE_PAGE = 100, 20
MAX_RUNS_LISTED, DEFAULT_RUNS_LISTED = 1000, 100
MAX_ASSUME_ACTIVE = 1000
#: UpdateSchedule mask paths -> the Schedule fields they copy.
MASK_PATHS = {
    "cron": "rule",
    "rrule": "rule",
    "interval": "rule",
    "time_zone": "time_zone",
    "dst_gap": "dst_gap",
    "dst_fold": "dst_fold",
    "misfire_policy": "misfire_policy",
    "misfire_grace": "misfire_grace",
    "catchup_window": "catchup_window",
    "max_catchup": "max_catchup",
    "overlap_policy": "overlap_policy",
    "start_time": "start_time",
    "end_time": "end_time",
    "jitter": "jitter",
    "job_template": "job_template",
}


class ScheduleServicer(schedule_service_pb2_grpc.ScheduleServiceServicer):
    """``gnomon.v1.ScheduleService`` (proto/gnomon/v1/schedule_service.proto has each method's
    contract). ``schedules``: the engine every handler calls (built by
    :func:`gnomon.api.service.build`, or by :meth:`on`); ``region``: the API's region; ``quotas``:
    checks ``max_schedules`` on CreateSchedule (None: not checked). The jobs TriggerSchedule and
    BackfillSchedule write are admitted through the admission the interceptor binds to the call
    (:func:`gnomon.common.rpc.admission.current_admit`), never here."""

    def __init__(
        self,
        schedules: ScheduleEngine,
        *,
        region: str,
        reply_budget_bytes: int = REPLY_BUDGET_BYTES,
        quotas: QuotaGuard | None = None,
    ):
        self.region, self.schedules, self.quotas = region, schedules, quotas
        #: most serialized bytes of a List reply's items (``GNOMON_REPLY_BUDGET_BYTES``)
        self.reply_budget_bytes = reply_budget_bytes
        self.tzdata = tzdata_version()

    @classmethod
    def on(
        cls,
        engine: AsyncEngine,
        *,
        region: str,
        shards: int,
        planner_hints: PlannerHints | None = None,
        dispatcher_hints: DispatcherHints | None = None,
        catchup_rate: float = 20.0,
        catchup_burst: int = 20,
    ) -> ScheduleServicer:
        """A servicer over a new :class:`ScheduleEngine` on ``engine``. ``shards``: the region's shard
        count; ``catchup_rate`` (jobs/s) and ``catchup_burst``: the catch-up budget triggers share
        with the planner; ``planner_hints``/``dispatcher_hints`` may be None (no hints)."""
        schedules = ScheduleEngine(
            engine,
            shards=shards,
            catchup_rate=catchup_rate,
            catchup_burst=catchup_burst,
            wake_planner=planner_hints.wake if planner_hints is not None else None,
            wake_dispatchers=dispatcher_hints.wake if dispatcher_hints is not None else None,
        )
        return cls(schedules, region=region)

    def _proto(self, row: dict) -> schedule_pb2.Schedule:
        return schedule_to_proto(row, tzdata=self.tzdata)

    async def CreateSchedule(self, request, context):
        """Creates a schedule (idempotent per ``request_id``) and returns it. INVALID_ARGUMENT lists
        every bad field (RULE_NEVER_FIRES when the rule has no future time); ALREADY_EXISTS for a
        taken id or a reused request id with another request; RESOURCE_EXHAUSTED (QUOTA_EXCEEDED)
        when the namespace has ``max_schedules`` schedules already (``quotas``; None: not checked)."""
        new = validate_create(request, region=self.region)
        if self.quotas is not None:
            await self.quotas.admit_schedule(new.namespace)
        row, _ = await self.schedules.create(new)
        return pb.CreateScheduleResponse(schedule=self._proto(row))

    async def GetSchedule(self, request, context):
        """The schedule ``name``. INVALID_ARGUMENT for a bad name, NOT_FOUND for an unknown one."""
        ns, sid = parse_schedule_name(request.name)
        return pb.GetScheduleResponse(schedule=self._proto(await self.schedules.get(ns, sid)))

    async def ListSchedules(self, request, context):
        """Schedules of ``parent`` in id order, optionally only paused/active ones or one ``queue``;
        ``page_size`` 0-1000 (0 = 100). INVALID_ARGUMENT for a bad field or page token."""
        ns = parse_parent(request.parent)
        size = pagination.checked_page_size(request.page_size)
        if request.paused not in pb.PausedFilter.values():
            raise violation("paused", "unknown value")
        if request.queue and not QUEUE_RE.fullmatch(request.queue):
            raise violation(
                "queue", "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit"
            )
        paused = {pb.PAUSED_FILTER_PAUSED: True, pb.PAUSED_FILTER_ACTIVE: False}.get(request.paused)
        filt = pagination.fingerprint(ns, paused, request.queue)
        after = (
            pagination.text_of(
                pagination.decode(request.page_token, "ListSchedules", filt), "a", "ListSchedules"
            )
            if request.page_token
            else None
        )
        rows = await self.schedules.list_schedules(
            ns, paused=paused, queue=request.queue or None, after=after, limit=size + 1
        )
        items, token = pagination.budgeted_page(
            rows,
            size,
            "ListSchedules",
            filt,
            lambda r: {"a": r["schedule_id"]},
            self._proto,
            budget_bytes=self.reply_budget_bytes,
        )
        return pb.ListSchedulesResponse(schedules=items, next_page_token=token)

    async def UpdateSchedule(self, request, context):
        """Applies the fields named by ``update_mask`` (empty: all) of ``schedule`` when its ``etag``
        matches; a rule change re-plans. INVALID_ARGUMENT for unknown mask paths or bad values,
        FAILED_PRECONDITION for a stale etag, NOT_FOUND for an unknown schedule."""
        ns, sid = parse_schedule_name(request.schedule.name, field="schedule.name")
        paths = list(request.update_mask.paths) or list(MASK_PATHS)
        bad = [p for p in paths if p not in MASK_PATHS]
        if bad:
            raise violation("update_mask", f"unknown or read-only paths {bad}; allowed: {sorted(MASK_PATHS)}")

        def merge(row: dict) -> ScheduleValues:
            merged = self._proto(row)
            for p in paths:
                _copy_path(request.schedule, merged, p)
            v = Validator()
            values = schedule_values(v, merged)
            v.raise_if_any()
            assert values is not None  # None only with violations, raised above
            check_rule(values)
            return values

        row = await self.schedules.update(ns, sid, request.schedule.etag, merge)
        return pb.UpdateScheduleResponse(schedule=self._proto(row))

    async def DeleteSchedule(self, request, context):
        """Deletes the schedule (``etag`` checked when given) and withdraws its future jobs:
        ``withdrawn_jobs``. NOT_FOUND, FAILED_PRECONDITION as for UpdateSchedule."""
        ns, sid = parse_schedule_name(request.name)
        return pb.DeleteScheduleResponse(withdrawn_jobs=await self.schedules.delete(ns, sid, request.etag))

    async def PauseSchedule(self, request, context):
        """Pauses the schedule; its future jobs are withdrawn (``withdrawn_jobs``). NOT_FOUND for an
        unknown schedule."""
        ns, sid = parse_schedule_name(request.name)
        row, n = await self.schedules.pause(ns, sid)
        return pb.PauseScheduleResponse(schedule=self._proto(row), withdrawn_jobs=n)

    async def ResumeSchedule(self, request, context):
        """Resumes the schedule (times missed while paused follow its misfire policy). NOT_FOUND for
        an unknown schedule."""
        ns, sid = parse_schedule_name(request.name)
        return pb.ResumeScheduleResponse(schedule=self._proto(await self.schedules.resume(ns, sid)))

    async def TriggerSchedule(self, request, context):
        """Runs the schedule now under ``overlap_policy`` (unspecified: the schedule's); idempotent
        per ``request_id``. Returns the occurrence and its job (if one was created). INVALID_ARGUMENT
        for bad fields, NOT_FOUND for an unknown schedule; RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) when
        the job the overlap policy lets run would exceed the namespace's ``max_pending_jobs`` or
        ``max_create_rate`` (admitted inside the write transaction through the admission the
        interceptor bound, as the policy table's ``Admission.TRIGGER`` says), nothing written."""
        ns, sid = parse_schedule_name(request.name)
        v = Validator()
        policy = overlap_of(v, request.overlap_policy, "overlap_policy", "")
        request_id = parse_request_id(v, request.request_id)
        v.raise_if_any()
        with tracing.caller(context.invocation_metadata() if tracing.ENABLED else None):
            out = await self.schedules.trigger(
                ns, sid, policy=policy or None, request_id=request_id, admit=current_admit()
            )
        return pb.TriggerScheduleResponse(
            occurrence=occurrence_to_proto(out.record, schedule_name(ns, sid)),
            job=job_to_proto(out.job) if out.job else None,
        )

    async def BackfillSchedule(self, request, context):
        """Records the rule's fire times in ``[start_time, end_time)`` (both required, in the past, at
        most 1000 times) as buffered occurrences the planner releases under ``overlap_policy``.
        INVALID_ARGUMENT (INVALID_TIME_RANGE when ``end_time <= start_time``), NOT_FOUND;
        RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) when pending jobs plus the range's new BUFFERED
        occurrences (counted inside the write transaction after deduplication, as the policy table's
        ``Admission.BACKFILL`` says; the admission the interceptor bound) would exceed
        ``max_pending_jobs``: the whole backfill is refused and nothing is written (docs/schedules.md)."""
        ns, sid = parse_schedule_name(request.name)
        v = Validator()
        start = rule_instant(v, request.start_time, "start_time") if request.HasField("start_time") else None
        end = rule_instant(v, request.end_time, "end_time") if request.HasField("end_time") else None
        if start is None and not request.HasField("start_time"):
            v.add("start_time", "is required")
        if end is None and not request.HasField("end_time"):
            v.add("end_time", "is required")
        policy = overlap_of(v, request.overlap_policy, "overlap_policy", "")
        v.raise_if_any()
        assert start is not None and end is not None  # both checked above
        if end <= start:
            raise InvalidArgument(
                [FieldViolation("end_time", "must be after start_time")],
                reason=ErrorReason.INVALID_TIME_RANGE,
            )
        out = await self.schedules.backfill(
            ns, sid, start=start, end=end, policy=policy or None, admit=current_admit()
        )
        name = schedule_name(ns, sid)
        return pb.BackfillScheduleResponse(occurrences=[occurrence_to_proto(r, name) for r in out])

    async def PreviewSchedule(self, request, context):
        """The next ``count`` (0-1000, 0 = 10) fire times of the saved schedule ``name`` or of
        ``rule``, after ``from_time`` (default: now), with DST-skipped times listed; writes nothing.
        INVALID_ARGUMENT for bad fields, NOT_FOUND for an unknown schedule."""
        if not (0 <= request.count <= MAX_PREVIEW):
            raise violation("count", f"must be between 0 and {MAX_PREVIEW}")
        schedule, spec = None, None
        if request.name:
            schedule = parse_schedule_name(request.name)
        elif not request.HasField("rule"):
            raise violation("rule", "give a saved schedule's name or a rule")
        else:
            spec = preview_spec(request.rule)
        after = None
        if request.HasField("from_time"):
            v = Validator()
            after = rule_instant(v, request.from_time, "from_time")
            v.raise_if_any()
        try:
            items = await self.schedules.preview(
                count=request.count or DEFAULT_PREVIEW, spec=spec, schedule=schedule, after=after
            )
        except RuleError as e:  # RULE_TOO_EXPENSIVE: a search past its work budget
            prefix = "" if schedule is not None else "rule."
            raise InvalidArgument([FieldViolation(prefix + e.field, e.message)], reason=e.reason) from e
        return pb.PreviewScheduleResponse(
            tzdata_version=self.tzdata,
            fire_times=[
                schedule_pb2.PreviewFireTime(
                    fire_time=to_timestamp(o.fire_time),
                    local_time=o.local_time.isoformat(),
                    note=o.note,
                    skipped=o.skipped_dst_gap,
                )
                for o in items
            ],
        )

    async def ListScheduleOccurrences(self, request, context):
        """Decision records of schedule ``parent``, newest nominal time first, optionally one
        ``decision``; ``page_size`` 0-1000 (0 = 100). INVALID_ARGUMENT for bad fields or token,
        NOT_FOUND for an unknown schedule."""
        ns, sid = parse_schedule_name(request.parent, field="parent")
        size = pagination.checked_page_size(request.page_size)
        decision = None
        if request.decision:
            if request.decision not in schedule_pb2.OccurrenceDecision.values():
                raise violation("decision", "unknown value")
            decision = schedule_pb2.OccurrenceDecision.Name(request.decision).removeprefix(
                "OCCURRENCE_DECISION_"
            )
        method = "ListScheduleOccurrences"
        filt = pagination.fingerprint(ns, sid, decision)
        before = (
            pagination.instant_of(pagination.decode(request.page_token, method, filt), "b", method)
            if request.page_token
            else None
        )
        rows = await self.schedules.list_occurrences(
            ns, sid, decision=decision, before=before, limit=size + 1
        )
        name = schedule_name(ns, sid)
        items, token = pagination.budgeted_page(
            rows,
            size,
            method,
            filt,
            lambda r: {"b": r["nominal_time"].isoformat()},
            lambda r: occurrence_to_proto(r, name),
            budget_bytes=self.reply_budget_bytes,
        )
        return pb.ListScheduleOccurrencesResponse(occurrences=items, next_page_token=token)

    async def SimulateOutage(self, request, context):
        """Predicts the planner's decisions after an outage from ``outage_start_time`` to
        ``outage_end_time`` for schedule ``name`` or the schedules of ``parent`` (paged, ``page_size``
        0-100, 0 = 20), with ``assume_active`` (0-1000) occurrences assumed active and at most
        ``max_runs`` (0-1000, 0 = 100) runs (and skipped ranges) listed per schedule; a page ends early
        at the reply budget. Writes nothing. INVALID_ARGUMENT for
        bad fields (both ``name`` and ``parent``, a missing or bad instant, a window that is empty,
        longer than 366 days or holds more than 100000 nominal times), NOT_FOUND for an unknown
        schedule."""
        method = "SimulateOutage"
        v = Validator()
        if request.name and request.parent:
            v.add("parent", "give name (one schedule) or parent (a namespace), not both")
        start = end = None
        for field in ("outage_start_time", "outage_end_time"):
            if not request.HasField(field):
                v.add(field, "is required")
        if request.HasField("outage_start_time"):
            start = rule_instant(v, request.outage_start_time, "outage_start_time")
        if request.HasField("outage_end_time"):
            end = rule_instant(v, request.outage_end_time, "outage_end_time")
        if not (0 <= request.assume_active <= MAX_ASSUME_ACTIVE):
            v.add("assume_active", f"must be between 0 and {MAX_ASSUME_ACTIVE}")
        if not (0 <= request.page_size <= MAX_SIMULATE_PAGE):
            v.add("page_size", f"must be between 0 and {MAX_SIMULATE_PAGE}")
        if not (0 <= request.max_runs <= MAX_RUNS_LISTED):
            v.add("max_runs", f"must be between 0 and {MAX_RUNS_LISTED}")
        v.raise_if_any()
        assert start is not None and end is not None  # both checked above
        sid: str | None = None
        if request.name:
            ns, sid = parse_schedule_name(request.name)
        else:
            ns = parse_parent(request.parent)
        filt = pagination.fingerprint(ns, sid, start, end, request.assume_active, request.max_runs)
        after = (
            pagination.text_of(pagination.decode(request.page_token, method, filt), "a", method)
            if request.page_token
            else None
        )
        preds, more = await self.schedules.simulate_outage(
            ns,
            sid,
            start=start,
            end=end,
            assume_active=request.assume_active,
            after=after,
            limit=request.page_size or DEFAULT_SIMULATE_PAGE,
            max_listed=request.max_runs or DEFAULT_RUNS_LISTED,
        )
        items: list[pb.OutagePrediction] = []
        size = 0
        for p in preds:
            item = prediction_to_proto(p, schedule_name(ns, p.schedule["schedule_id"]))
            size += item.ByteSize()
            if items and size > self.reply_budget_bytes:  # the rest on the next page
                more = True
                break
            items.append(item)
        token = ""
        if more and items:
            last = items[-1].schedule.rsplit("/", 1)[-1]
            token = pagination.encode(method, filt, {"a": last})
        return pb.SimulateOutageResponse(predictions=items, next_page_token=token, tzdata_version=self.tzdata)


def _copy_path(src: schedule_pb2.Schedule, merged: schedule_pb2.Schedule, path: str) -> None:
    """Copies the field(s) of mask ``path`` from the request's schedule ``src`` into ``merged``."""
    if MASK_PATHS[path] == "rule":
        which = src.WhichOneof("rule")
        if which is None:
            raise violation(f"schedule.{path}", "the mask names the rule but the schedule carries none")
        if which == "interval":
            merged.interval.CopyFrom(src.interval)
        else:
            setattr(merged, which, getattr(src, which))
    elif src.DESCRIPTOR.fields_by_name[path].message_type is not None:
        merged.ClearField(path)
        if src.HasField(path):
            getattr(merged, path).CopyFrom(getattr(src, path))
    else:
        setattr(merged, path, getattr(src, path))
