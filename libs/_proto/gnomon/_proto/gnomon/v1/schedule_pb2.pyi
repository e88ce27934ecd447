import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import retry_pb2 as _retry_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_POLICY_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_LATEST: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_SKIP: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_COALESCE: _ClassVar[MisfirePolicy]
    MISFIRE_POLICY_RUN_ALL: _ClassVar[MisfirePolicy]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_SKIP: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ONE: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BUFFER_ALL: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_CANCEL_OTHER: _ClassVar[OverlapPolicy]

class DstGapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_GAP_POLICY_UNSPECIFIED: _ClassVar[DstGapPolicy]
    DST_GAP_POLICY_SHIFT_FORWARD: _ClassVar[DstGapPolicy]
    DST_GAP_POLICY_SKIP: _ClassVar[DstGapPolicy]

class DstFoldPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DST_FOLD_POLICY_UNSPECIFIED: _ClassVar[DstFoldPolicy]
    DST_FOLD_POLICY_FIRST: _ClassVar[DstFoldPolicy]
    DST_FOLD_POLICY_SECOND: _ClassVar[DstFoldPolicy]
    DST_FOLD_POLICY_BOTH: _ClassVar[DstFoldPolicy]

class OccurrenceDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OCCURRENCE_DECISION_UNSPECIFIED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_FIRED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_LATE: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_COALESCED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_BUFFERED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_SKIPPED_OVERLAP: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_SKIPPED_MISFIRE: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_SKIPPED_DST_GAP: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_SKIPPED_PAUSED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_DEDUPLICATED: _ClassVar[OccurrenceDecision]
    OCCURRENCE_DECISION_SKIPPED_QUOTA: _ClassVar[OccurrenceDecision]

class OccurrenceSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OCCURRENCE_SOURCE_UNSPECIFIED: _ClassVar[OccurrenceSource]
    OCCURRENCE_SOURCE_RULE: _ClassVar[OccurrenceSource]
    OCCURRENCE_SOURCE_TRIGGER: _ClassVar[OccurrenceSource]
    OCCURRENCE_SOURCE_BACKFILL: _ClassVar[OccurrenceSource]
MISFIRE_POLICY_UNSPECIFIED: MisfirePolicy
MISFIRE_POLICY_RUN_LATEST: MisfirePolicy
MISFIRE_POLICY_SKIP: MisfirePolicy
MISFIRE_POLICY_COALESCE: MisfirePolicy
MISFIRE_POLICY_RUN_ALL: MisfirePolicy
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_SKIP: OverlapPolicy
OVERLAP_POLICY_BUFFER_ONE: OverlapPolicy
OVERLAP_POLICY_BUFFER_ALL: OverlapPolicy
OVERLAP_POLICY_CANCEL_OTHER: OverlapPolicy
DST_GAP_POLICY_UNSPECIFIED: DstGapPolicy
DST_GAP_POLICY_SHIFT_FORWARD: DstGapPolicy
DST_GAP_POLICY_SKIP: DstGapPolicy
DST_FOLD_POLICY_UNSPECIFIED: DstFoldPolicy
DST_FOLD_POLICY_FIRST: DstFoldPolicy
DST_FOLD_POLICY_SECOND: DstFoldPolicy
DST_FOLD_POLICY_BOTH: DstFoldPolicy
OCCURRENCE_DECISION_UNSPECIFIED: OccurrenceDecision
OCCURRENCE_DECISION_FIRED: OccurrenceDecision
OCCURRENCE_DECISION_LATE: OccurrenceDecision
OCCURRENCE_DECISION_COALESCED: OccurrenceDecision
OCCURRENCE_DECISION_BUFFERED: OccurrenceDecision
OCCURRENCE_DECISION_SKIPPED_OVERLAP: OccurrenceDecision
OCCURRENCE_DECISION_SKIPPED_MISFIRE: OccurrenceDecision
OCCURRENCE_DECISION_SKIPPED_DST_GAP: OccurrenceDecision
OCCURRENCE_DECISION_SKIPPED_PAUSED: OccurrenceDecision
OCCURRENCE_DECISION_DEDUPLICATED: OccurrenceDecision
OCCURRENCE_DECISION_SKIPPED_QUOTA: OccurrenceDecision
OCCURRENCE_SOURCE_UNSPECIFIED: OccurrenceSource
OCCURRENCE_SOURCE_RULE: OccurrenceSource
OCCURRENCE_SOURCE_TRIGGER: OccurrenceSource
OCCURRENCE_SOURCE_BACKFILL: OccurrenceSource

class JobTemplate(_message.Message):
    __slots__ = ("queue", "payload", "max_attempts", "lease_duration", "idempotent", "retry_policy", "start_to_close", "start_deadline")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    START_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    payload: bytes
    max_attempts: int
    lease_duration: _duration_pb2.Duration
    idempotent: bool
    retry_policy: _retry_pb2.RetryPolicy
    start_to_close: _duration_pb2.Duration
    start_deadline: _duration_pb2.Duration
    def __init__(self, queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., max_attempts: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idempotent: _Optional[bool] = ..., retry_policy: _Optional[_Union[_retry_pb2.RetryPolicy, _Mapping]] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., start_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("name", "cron", "rrule", "interval", "time_zone", "dst_gap", "dst_fold", "misfire_policy", "misfire_grace", "catchup_window", "max_catchup", "overlap_policy", "start_time", "end_time", "jitter", "job_template", "paused", "version", "etag", "create_time", "update_time", "next_fire_time", "planned_through_time", "region", "request_id", "tzdata_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    RRULE_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    DST_GAP_FIELD_NUMBER: _ClassVar[int]
    DST_FOLD_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_GRACE_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCHUP_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    JOB_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PLANNED_THROUGH_TIME_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TZDATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    cron: str
    rrule: str
    interval: _duration_pb2.Duration
    time_zone: str
    dst_gap: DstGapPolicy
    dst_fold: DstFoldPolicy
    misfire_policy: MisfirePolicy
    misfire_grace: _duration_pb2.Duration
    catchup_window: _duration_pb2.Duration
    max_catchup: int
    overlap_policy: OverlapPolicy
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    jitter: _duration_pb2.Duration
    job_template: JobTemplate
    paused: bool
    version: int
    etag: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    next_fire_time: _timestamp_pb2.Timestamp
    planned_through_time: _timestamp_pb2.Timestamp
    region: str
    request_id: str
    tzdata_version: str
    def __init__(self, name: _Optional[str] = ..., cron: _Optional[str] = ..., rrule: _Optional[str] = ..., interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., time_zone: _Optional[str] = ..., dst_gap: _Optional[_Union[DstGapPolicy, str]] = ..., dst_fold: _Optional[_Union[DstFoldPolicy, str]] = ..., misfire_policy: _Optional[_Union[MisfirePolicy, str]] = ..., misfire_grace: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., catchup_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_catchup: _Optional[int] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., jitter: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., job_template: _Optional[_Union[JobTemplate, _Mapping]] = ..., paused: _Optional[bool] = ..., version: _Optional[int] = ..., etag: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., planned_through_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., region: _Optional[str] = ..., request_id: _Optional[str] = ..., tzdata_version: _Optional[str] = ...) -> None: ...

class ScheduleOccurrence(_message.Message):
    __slots__ = ("name", "nominal_time", "local_time", "decision", "source", "note", "job", "schedule_time", "decide_time", "missed_count", "missed_first_time", "missed_last_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    MISSED_COUNT_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    MISSED_LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    nominal_time: _timestamp_pb2.Timestamp
    local_time: str
    decision: OccurrenceDecision
    source: OccurrenceSource
    note: str
    job: str
    schedule_time: _timestamp_pb2.Timestamp
    decide_time: _timestamp_pb2.Timestamp
    missed_count: int
    missed_first_time: _timestamp_pb2.Timestamp
    missed_last_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ..., decision: _Optional[_Union[OccurrenceDecision, str]] = ..., source: _Optional[_Union[OccurrenceSource, str]] = ..., note: _Optional[str] = ..., job: _Optional[str] = ..., schedule_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., decide_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., missed_count: _Optional[int] = ..., missed_first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., missed_last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PreviewFireTime(_message.Message):
    __slots__ = ("fire_time", "local_time", "note", "skipped")
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LOCAL_TIME_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    fire_time: _timestamp_pb2.Timestamp
    local_time: str
    note: str
    skipped: bool
    def __init__(self, fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_time: _Optional[str] = ..., note: _Optional[str] = ..., skipped: _Optional[bool] = ...) -> None: ...
