"""``gnomon.v1.ScheduleService``: a thin adapter (validate, convert, call storage and the shared
scheduling rules). Every write is one transaction; a refused request writes nothing. After a change
the planner is hinted (best effort: it also polls)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2_grpc
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.api.convert import job_to_proto, occurrence_to_proto, schedule_to_proto
from gnomon.api.names import parse_parent, parse_schedule_name
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
from gnomon.api.validation import QUEUE_RE
from gnomon.common.errors import FieldViolation, InvalidArgument, Validator
from gnomon.common.scheduling.misfire import BUFFERED, DEDUPLICATED, FIRED, Decision
from gnomon.common.scheduling.occurrences import StepBuilder
from gnomon.common.scheduling.overlap import OverlapState
from gnomon.common.storage import planning as plan_store
from gnomon.common.storage import schedules as store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.jobs import get_job
from gnomon.common.time import compile_rule, get_zone, tzdata_version
from gnomon.common.timeconv import to_timestamp

MAX_PAGE, DEFAULT_PAGE = 1000, 100
MAX_PREVIEW, DEFAULT_PREVIEW = 1000, 10
MAX_BACKFILL = 1000
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


def _first_after(rec, after: datetime) -> datetime | None:
    """The first nominal time (skip markers included) strictly after ``after``; None when exhausted."""
    return next((o.fire_time for o in rec.iter_after(after)), None)


def _token(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _untoken(token: str, filt: str, method: str, key: str) -> str:
    """The cursor ``key`` of a page token made by :func:`_token` for the same filters; any other
    token (garbage, foreign, hand-made with a wrong shape) is INVALID_ARGUMENT on ``page_token``."""
    try:
        d = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        v = d[key] if isinstance(d, dict) and d.get("f") == filt else None
        if isinstance(v, str) and v.isprintable() and len(v) <= 64:
            return v
    except Exception:
        pass
    raise violation("page_token", f"is not a token returned by {method} for this request")


class ScheduleServicer(schedule_service_pb2_grpc.ScheduleServiceServicer):
    """``gnomon.v1.ScheduleService`` (see proto/gnomon/v1/schedule_service.proto for each method's
    contract). ``planner_hints``/``dispatcher_hints`` may be None (no hints)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        region: str,
        shards: int,
        planner_hints=None,
        dispatcher_hints=None,
        catchup_rate: float = 20.0,
        catchup_burst: int = 20,
    ):
        self.engine, self.region, self.shards = engine, region, shards
        self.planner_hints, self.dispatcher_hints = planner_hints, dispatcher_hints
        self.catchup_rate, self.catchup_burst = catchup_rate, catchup_burst
        self.tzdata = tzdata_version()

    def _proto(self, row: dict) -> schedule_pb2.Schedule:
        return schedule_to_proto(row, tzdata=self.tzdata)

    def _hint(self, row: dict) -> None:
        if self.planner_hints is not None:
            self.planner_hints.wake(store.schedule_name(row["namespace"], row["schedule_id"]))

    async def CreateSchedule(self, request, context):
        new = validate_create(request, region=self.region)
        rec = compile_rule(new.values.spec())

        async def txn(conn):
            now = await store.db_now(conn)
            nxt = _first_after(rec, store.planning_start(new.values.start_time, now))
            if nxt is None:
                raise InvalidArgument(
                    [
                        FieldViolation(
                            f"schedule.{new.values.rule_kind.lower()}",
                            "the rule has no fire time after now (and before end_time)",
                        )
                    ],
                    reason="RULE_NEVER_FIRES",
                )
            return await store.insert_schedule(conn, new, now=now, next_fire_at=nxt)

        row, created = await run_transaction(self.engine, txn)
        if created:
            self._hint(row)
        return pb.CreateScheduleResponse(schedule=self._proto(row))

    async def GetSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.name)
        row = await run_transaction(self.engine, lambda c: store.get_schedule(c, ns, sid))
        return pb.GetScheduleResponse(schedule=self._proto(row))

    async def ListSchedules(self, request, context):
        ns = parse_parent(request.parent)
        if not (0 <= request.page_size <= MAX_PAGE):
            raise violation("page_size", f"must be between 0 and {MAX_PAGE}")
        if request.paused not in pb.PausedFilter.values():
            raise violation("paused", "unknown value")
        if request.queue and not QUEUE_RE.fullmatch(request.queue):
            raise violation(
                "queue", "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit"
            )
        paused = {pb.PAUSED_FILTER_PAUSED: True, pb.PAUSED_FILTER_ACTIVE: False}.get(request.paused)
        filt = hashlib.sha256(f"{ns}|{paused}|{request.queue}".encode()).hexdigest()[:16]
        after = _untoken(request.page_token, filt, "ListSchedules", "a") if request.page_token else None
        size = request.page_size or DEFAULT_PAGE
        rows = await run_transaction(
            self.engine,
            lambda c: store.list_schedules(
                c, ns, paused=paused, queue=request.queue or None, after=after, limit=size + 1
            ),
        )
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            token = _token({"a": rows[-1]["schedule_id"], "f": filt})
        return pb.ListSchedulesResponse(schedules=[self._proto(r) for r in rows], next_page_token=token)

    async def UpdateSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.schedule.name, field="schedule.name")
        paths = list(request.update_mask.paths) or list(MASK_PATHS)
        bad = [p for p in paths if p not in MASK_PATHS]
        if bad:
            raise violation("update_mask", f"unknown or read-only paths {bad}; allowed: {sorted(MASK_PATHS)}")

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            store.check_etag(row, request.schedule.etag)
            merged = self._proto(row)
            for p in paths:
                src = request.schedule
                if MASK_PATHS[p] == "rule":
                    which = src.WhichOneof("rule")
                    if which is None:
                        raise violation(
                            f"schedule.{p}", "the mask names the rule but the schedule carries none"
                        )
                    if which == "interval":
                        merged.interval.CopyFrom(src.interval)
                    else:
                        setattr(merged, which, getattr(src, which))
                elif src.DESCRIPTOR.fields_by_name[p].message_type is not None:
                    merged.ClearField(p)
                    if src.HasField(p):
                        getattr(merged, p).CopyFrom(getattr(src, p))
                else:
                    setattr(merged, p, getattr(src, p))
            v = Validator()
            values = schedule_values(v, merged)
            v.raise_if_any()
            check_rule(values)
            cols = values.columns()
            changes = {k: val for k, val in cols.items() if row[k] != val}
            if not changes:
                return row
            now = await store.db_now(conn)
            start = store.replan_start(row["planned_through"], values.start_time, now)
            return await store.update_schedule(
                conn,
                row,
                changes,
                now=now,
                replan_from=start,
                next_fire_at=_first_after(compile_rule(values.spec()), start),
            )

        row = await run_transaction(self.engine, txn)
        self._hint(row)
        return pb.UpdateScheduleResponse(schedule=self._proto(row))

    async def DeleteSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.name)

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            store.check_etag(row, request.etag)
            return await store.delete_schedule(conn, row, now=await store.db_now(conn))

        n = await run_transaction(self.engine, txn)
        return pb.DeleteScheduleResponse(withdrawn_jobs=n)

    async def PauseSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.name)

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            return await store.pause_schedule(conn, row, now=await store.db_now(conn))

        row, n = await run_transaction(self.engine, txn)
        return pb.PauseScheduleResponse(schedule=self._proto(row), withdrawn_jobs=n)

    async def ResumeSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.name)

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            return await store.resume_schedule(conn, row, now=await store.db_now(conn))

        row = await run_transaction(self.engine, txn)
        self._hint(row)
        return pb.ResumeScheduleResponse(schedule=self._proto(row))

    async def TriggerSchedule(self, request, context):
        ns, sid = parse_schedule_name(request.name)
        v = Validator()
        policy = overlap_of(v, request.overlap_policy, "overlap_policy", "")
        request_id = parse_request_id(v, request.request_id)
        v.raise_if_any()

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            if request_id is not None:
                prior = await plan_store.record_by_request(conn, row["uid"], request_id)
                if prior is not None:  # a retried trigger: the first one's outcome, nothing new
                    job = await get_job(conn, ns, prior["job_id"]) if prior.get("job_id") else None
                    return row, prior, job
            now = await store.db_now(conn)
            nominal = now.replace(microsecond=now.microsecond // 1000 * 1000)
            local = nominal.astimezone(get_zone(row["time_zone"])).isoformat()
            existing = await store.get_occurrence(conn, row["uid"], nominal)
            if existing is not None:
                return row, dict(existing, decision=DEDUPLICATED), None
            active = (await plan_store.active_occurrences(conn, [row["uid"]])).get(row["uid"], [])
            state = OverlapState(active=len(active), buffered=row["buffered"])
            b = StepBuilder(now=now, shards=self.shards)
            rec = b.add(
                row,
                Decision(nominal, local, FIRED, "triggered (TriggerSchedule)", run=True),
                source="TRIGGER",
                state=state,
                active=active,
                policy=policy or None,
                request_id=request_id,
            )
            await b.finish(
                conn, region=row["region"], catchup_rate=self.catchup_rate, catchup_burst=self.catchup_burst
            )
            if state.buffered != row["buffered"]:
                await plan_store.add_buffered(conn, row["uid"], state.buffered - row["buffered"])
            job = await get_job(conn, ns, rec["job_id"]) if rec.get("job_id") else None
            return row, rec, job

        row, rec, job = await run_transaction(self.engine, txn)
        if job is not None and self.dispatcher_hints is not None:
            self.dispatcher_hints.wake(job["scheduled_at"])
        if rec["decision"] == BUFFERED:
            self._hint(row)
        name = store.schedule_name(ns, sid)
        return pb.TriggerScheduleResponse(
            occurrence=occurrence_to_proto(rec, name), job=job_to_proto(job) if job else None
        )

    async def BackfillSchedule(self, request, context):
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
        if end <= start:
            raise InvalidArgument(
                [FieldViolation("end_time", "must be after start_time")], reason="INVALID_TIME_RANGE"
            )

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid, lock=True)
            now = await store.db_now(conn)
            if end > now:
                raise violation(
                    "end_time", "must not be after now (database clock); future times are planned by the rule"
                )
            rec = compile_rule(store.rule_spec_of(row))
            occs = []
            for o in rec.iter_after(start - timedelta(microseconds=1)):
                if o.fire_time >= end:
                    break
                if len(occs) == MAX_BACKFILL:
                    raise violation(
                        "end_time", f"the range holds more than {MAX_BACKFILL} fire times; split it"
                    )
                occs.append(o)
            have = await plan_store.existing_records(conn, row["uid"], [o.fire_time for o in occs])
            out, new = [], []
            for o in occs:
                base = dict(
                    nominal=o.fire_time, local_time=o.local_time.isoformat(), source="BACKFILL", now=now
                )
                if o.fire_time in have:
                    out.append(
                        plan_store.record_row(
                            row, decision=DEDUPLICATED, note="already has an occurrence", **base
                        )
                    )
                elif o.skipped_dst_gap:
                    r = plan_store.record_row(row, decision="SKIPPED_DST_GAP", note=o.note, **base)
                    new.append(r)
                    out.append(r)
                else:
                    r = plan_store.record_row(
                        row,
                        decision=BUFFERED,
                        note="backfill",
                        **base,
                        overlap_policy=policy or row["overlap_policy"],
                    )
                    new.append(r)
                    out.append(r)
            await plan_store.insert_records(conn, new)
            n = sum(r["decision"] == BUFFERED for r in new)
            if n:
                await plan_store.add_buffered(conn, row["uid"], n)
            return row, out

        row, out = await run_transaction(self.engine, txn)
        self._hint(row)
        name = store.schedule_name(ns, sid)
        return pb.BackfillScheduleResponse(occurrences=[occurrence_to_proto(r, name) for r in out])

    async def PreviewSchedule(self, request, context):
        if not (0 <= request.count <= MAX_PREVIEW):
            raise violation("count", f"must be between 0 and {MAX_PREVIEW}")
        count = request.count or DEFAULT_PREVIEW
        if request.name:
            ns, sid = parse_schedule_name(request.name)
            row = await run_transaction(self.engine, lambda c: store.get_schedule(c, ns, sid))
            spec = store.rule_spec_of(row)
        else:
            if not request.HasField("rule"):
                raise violation("rule", "give a saved schedule's name or a rule")
            spec = preview_spec(request.rule)
        if request.HasField("from_time"):
            v = Validator()
            after = rule_instant(v, request.from_time, "from_time")
            v.raise_if_any()
        else:
            after = await run_transaction(self.engine, store.db_now)
        rec = compile_rule(spec)
        items, fired = [], 0
        try:
            for o in rec.iter_after(after):  # skipped nominal times are listed but not counted
                items.append(o)
                fired += not o.skipped_dst_gap
                if fired == count or len(items) >= 3 * count + 10:
                    break
        except OverflowError:  # the rule's times run past year 9999
            pass
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
        ns, sid = parse_schedule_name(request.parent, field="parent")
        if not (0 <= request.page_size <= MAX_PAGE):
            raise violation("page_size", f"must be between 0 and {MAX_PAGE}")
        decision = None
        if request.decision:
            if request.decision not in schedule_pb2.OccurrenceDecision.values():
                raise violation("decision", "unknown value")
            decision = schedule_pb2.OccurrenceDecision.Name(request.decision).removeprefix(
                "OCCURRENCE_DECISION_"
            )
        filt = hashlib.sha256(f"{ns}|{sid}|{decision}".encode()).hexdigest()[:16]
        before = None
        if request.page_token:
            try:
                before = datetime.fromisoformat(
                    _untoken(request.page_token, filt, "ListScheduleOccurrences", "b")
                )
            except ValueError:
                raise violation("page_token", "is not a token returned by ListScheduleOccurrences") from None
            if before.tzinfo is None:
                raise violation("page_token", "is not a token returned by ListScheduleOccurrences")
        size = request.page_size or DEFAULT_PAGE

        async def txn(conn):
            row = await store.get_schedule(conn, ns, sid)
            return await store.list_occurrences(
                conn, row["uid"], decision=decision, before=before, limit=size + 1
            )

        rows = await run_transaction(self.engine, txn)
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            token = _token({"b": rows[-1]["nominal_time"].isoformat(), "f": filt})
        name = store.schedule_name(ns, sid)
        return pb.ListScheduleOccurrencesResponse(
            occurrences=[occurrence_to_proto(r, name) for r in rows], next_page_token=token
        )
