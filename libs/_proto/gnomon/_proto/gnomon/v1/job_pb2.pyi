import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import failure_class_pb2 as _failure_class_pb2
from gnomon._proto.gnomon.v1 import retry_pb2 as _retry_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_SCHEDULED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_DEAD: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_EXPIRED: _ClassVar[JobState]
    JOB_STATE_SKIPPED: _ClassVar[JobState]

class AttemptState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_STATE_UNSPECIFIED: _ClassVar[AttemptState]
    ATTEMPT_STATE_QUEUED: _ClassVar[AttemptState]
    ATTEMPT_STATE_RUNNING: _ClassVar[AttemptState]
    ATTEMPT_STATE_SUCCEEDED: _ClassVar[AttemptState]
    ATTEMPT_STATE_FAILED: _ClassVar[AttemptState]
    ATTEMPT_STATE_LOST: _ClassVar[AttemptState]
    ATTEMPT_STATE_CANCELLED: _ClassVar[AttemptState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_SCHEDULED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_DEAD: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_EXPIRED: JobState
JOB_STATE_SKIPPED: JobState
ATTEMPT_STATE_UNSPECIFIED: AttemptState
ATTEMPT_STATE_QUEUED: AttemptState
ATTEMPT_STATE_RUNNING: AttemptState
ATTEMPT_STATE_SUCCEEDED: AttemptState
ATTEMPT_STATE_FAILED: AttemptState
ATTEMPT_STATE_LOST: AttemptState
ATTEMPT_STATE_CANCELLED: AttemptState

class Job(_message.Message):
    __slots__ = ("name", "queue", "payload", "state", "version", "schedule_time", "deadline", "max_attempts", "attempt", "idempotency_key", "create_time", "dispatch_time", "start_time", "finish_time", "last_error", "region", "request_id", "lease_duration", "idempotent", "failure_class", "retry_policy", "start_to_close", "schedule", "nominal_time", "coalesced_count", "coalesced_first_time", "coalesced_last_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    COALESCED_COUNT_FIELD_NUMBER: _ClassVar[int]
    COALESCED_FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    COALESCED_LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue: str
    payload: bytes
    state: JobState
    version: int
    schedule_time: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    max_attempts: int
    attempt: int
    idempotency_key: str
    create_time: _timestamp_pb2.Timestamp
    dispatch_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    last_error: str
    region: str
    request_id: str
    lease_duration: _duration_pb2.Duration
    idempotent: bool
    failure_class: _failure_class_pb2.FailureClass
    retry_policy: _retry_pb2.RetryPolicy
    start_to_close: _duration_pb2.Duration
    schedule: str
    nominal_time: _timestamp_pb2.Timestamp
    coalesced_count: int
    coalesced_first_time: _timestamp_pb2.Timestamp
    coalesced_last_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., state: _Optional[_Union[JobState, str]] = ..., version: _Optional[int] = ..., schedule_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_attempts: _Optional[int] = ..., attempt: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dispatch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., region: _Optional[str] = ..., request_id: _Optional[str] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idempotent: _Optional[bool] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., retry_policy: _Optional[_Union[_retry_pb2.RetryPolicy, _Mapping]] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., schedule: _Optional[str] = ..., nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., coalesced_count: _Optional[int] = ..., coalesced_first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., coalesced_last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class JobAttempt(_message.Message):
    __slots__ = ("name", "attempt", "state", "worker_id", "dispatcher_id", "fencing_token", "version", "failure_class", "error", "claim_time", "accept_time", "finish_time", "lease_expire_time", "cancel_requested")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DISPATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TIME_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    attempt: int
    state: AttemptState
    worker_id: str
    dispatcher_id: str
    fencing_token: int
    version: int
    failure_class: _failure_class_pb2.FailureClass
    error: str
    claim_time: _timestamp_pb2.Timestamp
    accept_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    lease_expire_time: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, name: _Optional[str] = ..., attempt: _Optional[int] = ..., state: _Optional[_Union[AttemptState, str]] = ..., worker_id: _Optional[str] = ..., dispatcher_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., version: _Optional[int] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., error: _Optional[str] = ..., claim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., accept_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...
