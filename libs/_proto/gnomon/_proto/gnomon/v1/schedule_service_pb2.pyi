import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import job_pb2 as _job_pb2
from gnomon._proto.gnomon.v1 import schedule_pb2 as _schedule_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PausedFilter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAUSED_FILTER_UNSPECIFIED: _ClassVar[PausedFilter]
    PAUSED_FILTER_PAUSED: _ClassVar[PausedFilter]
    PAUSED_FILTER_ACTIVE: _ClassVar[PausedFilter]
PAUSED_FILTER_UNSPECIFIED: PausedFilter
PAUSED_FILTER_PAUSED: PausedFilter
PAUSED_FILTER_ACTIVE: PausedFilter

class CreateScheduleRequest(_message.Message):
    __slots__ = ("parent", "schedule_id", "schedule", "request_id")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    parent: str
    schedule_id: str
    schedule: _schedule_pb2.Schedule
    request_id: str
    def __init__(self, parent: _Optional[str] = ..., schedule_id: _Optional[str] = ..., schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token", "paused", "queue")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    paused: PausedFilter
    queue: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., paused: _Optional[_Union[PausedFilter, str]] = ..., queue: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[_schedule_pb2.Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[_schedule_pb2.Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule", "update_mask")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("name", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("withdrawn_jobs",)
    WITHDRAWN_JOBS_FIELD_NUMBER: _ClassVar[int]
    withdrawn_jobs: int
    def __init__(self, withdrawn_jobs: _Optional[int] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("schedule", "withdrawn_jobs")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    WITHDRAWN_JOBS_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    withdrawn_jobs: int
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ..., withdrawn_jobs: _Optional[int] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: _schedule_pb2.Schedule
    def __init__(self, schedule: _Optional[_Union[_schedule_pb2.Schedule, _Mapping]] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("name", "overlap_policy", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    overlap_policy: _schedule_pb2.OverlapPolicy
    request_id: str
    def __init__(self, name: _Optional[str] = ..., overlap_policy: _Optional[_Union[_schedule_pb2.OverlapPolicy, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("occurrence", "job")
    OCCURRENCE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    occurrence: _schedule_pb2.ScheduleOccurrence
    job: _job_pb2.Job
    def __init__(self, occurrence: _Optional[_Union[_schedule_pb2.ScheduleOccurrence, _Mapping]] = ..., job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class BackfillScheduleRequest(_message.Message):
    __slots__ = ("name", "start_time", "end_time", "overlap_policy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    overlap_policy: _schedule_pb2.OverlapPolicy
    def __init__(self, name: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., overlap_policy: _Optional[_Union[_schedule_pb2.OverlapPolicy, str]] = ...) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ("occurrences",)
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    occurrences: _containers.RepeatedCompositeFieldContainer[_schedule_pb2.ScheduleOccurrence]
    def __init__(self, occurrences: _Optional[_Iterable[_Union[_schedule_pb2.ScheduleOccurrence, _Mapping]]] = ...) -> None: ...

class PreviewRule(_message.Message):
    __slots__ = ("cron", "rrule", "interval", "time_zone", "dst_gap", "dst_fold", "start_time", "end_time")
    CRON_FIELD_NUMBER: _ClassVar[int]
    RRULE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    DST_GAP_FIELD_NUMBER: _ClassVar[int]
    DST_FOLD_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    cron: str
    rrule: str
    interval: _duration_pb2.Duration
    time_zone: str
    dst_gap: _schedule_pb2.DstGapPolicy
    dst_fold: _schedule_pb2.DstFoldPolicy
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, cron: _Optional[str] = ..., rrule: _Optional[str] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., time_zone: _Optional[str] = ..., dst_gap: _Optional[_Union[_schedule_pb2.DstGapPolicy, str]] = ..., dst_fold: _Optional[_Union[_schedule_pb2.DstFoldPolicy, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PreviewScheduleRequest(_message.Message):
    __slots__ = ("name", "rule", "from_time", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    FROM_TIME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    rule: PreviewRule
    from_time: _timestamp_pb2.Timestamp
    count: int
    def __init__(self, name: _Optional[str] = ..., rule: _Optional[_Union[PreviewRule, _Mapping]] = ..., from_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class PreviewScheduleResponse(_message.Message):
    __slots__ = ("fire_times", "tzdata_version")
    FIRE_TIMES_FIELD_NUMBER: _ClassVar[int]
    TZDATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    fire_times: _containers.RepeatedCompositeFieldContainer[_schedule_pb2.PreviewFireTime]
    tzdata_version: str
    def __init__(self, fire_times: _Optional[_Iterable[_Union[_schedule_pb2.PreviewFireTime, _Mapping]]] = ..., tzdata_version: _Optional[str] = ...) -> None: ...

class ListScheduleOccurrencesRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token", "decision")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    decision: _schedule_pb2.OccurrenceDecision
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., decision: _Optional[_Union[_schedule_pb2.OccurrenceDecision, str]] = ...) -> None: ...

class ListScheduleOccurrencesResponse(_message.Message):
    __slots__ = ("occurrences", "next_page_token")
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    occurrences: _containers.RepeatedCompositeFieldContainer[_schedule_pb2.ScheduleOccurrence]
    next_page_token: str
    def __init__(self, occurrences: _Optional[_Iterable[_Union[_schedule_pb2.ScheduleOccurrence, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SimulateOutageRequest(_message.Message):
    __slots__ = ("name", "parent", "outage_start_time", "outage_end_time", "assume_active", "page_size", "page_token", "max_runs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    OUTAGE_START_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTAGE_END_TIME_FIELD_NUMBER: _ClassVar[int]
    ASSUME_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    name: str
    parent: str
    outage_start_time: _timestamp_pb2.Timestamp
    outage_end_time: _timestamp_pb2.Timestamp
    assume_active: int
    page_size: int
    page_token: str
    max_runs: int
    def __init__(self, name: _Optional[str] = ..., parent: _Optional[str] = ..., outage_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outage_end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., assume_active: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., max_runs: _Optional[int] = ...) -> None: ...

class SkippedOccurrenceRange(_message.Message):
    __slots__ = ("decision", "note", "count", "first_nominal_time", "last_nominal_time")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    decision: _schedule_pb2.OccurrenceDecision
    note: str
    count: int
    first_nominal_time: _timestamp_pb2.Timestamp
    last_nominal_time: _timestamp_pb2.Timestamp
    def __init__(self, decision: _Optional[_Union[_schedule_pb2.OccurrenceDecision, str]] = ..., note: _Optional[str] = ..., count: _Optional[int] = ..., first_nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class OutagePrediction(_message.Message):
    __slots__ = ("schedule", "misfire_policy", "overlap_policy", "missed_count", "missed_first_time", "missed_last_time", "runs", "run_count", "skipped", "catchup_finish_time", "assumptions", "paused", "skipped_count")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_POLICY_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    MISSED_COUNT_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    MISSED_LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    RUN_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    ASSUMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    misfire_policy: _schedule_pb2.MisfirePolicy
    overlap_policy: _schedule_pb2.OverlapPolicy
    missed_count: int
    missed_first_time: _timestamp_pb2.Timestamp
    missed_last_time: _timestamp_pb2.Timestamp
    runs: _containers.RepeatedCompositeFieldContainer[_schedule_pb2.ScheduleOccurrence]
    run_count: int
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedOccurrenceRange]
    catchup_finish_time: _timestamp_pb2.Timestamp
    assumptions: _containers.RepeatedScalarFieldContainer[str]
    paused: bool
    skipped_count: int
    def __init__(self, schedule: _Optional[str] = ..., misfire_policy: _Optional[_Union[_schedule_pb2.MisfirePolicy, str]] = ..., overlap_policy: _Optional[_Union[_schedule_pb2.OverlapPolicy, str]] = ..., missed_count: _Optional[int] = ..., missed_first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., missed_last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., runs: _Optional[_Iterable[_Union[_schedule_pb2.ScheduleOccurrence, _Mapping]]] = ..., run_count: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[SkippedOccurrenceRange, _Mapping]]] = ..., catchup_finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., assumptions: _Optional[_Iterable[str]] = ..., paused: _Optional[bool] = ..., skipped_count: _Optional[int] = ...) -> None: ...

class SimulateOutageResponse(_message.Message):
    __slots__ = ("predictions", "next_page_token", "tzdata_version")
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TZDATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[OutagePrediction]
    next_page_token: str
    tzdata_version: str
    def __init__(self, predictions: _Optional[_Iterable[_Union[OutagePrediction, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., tzdata_version: _Optional[str] = ...) -> None: ...
