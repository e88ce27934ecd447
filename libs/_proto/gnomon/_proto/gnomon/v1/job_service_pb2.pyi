import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import job_pb2 as _job_pb2
from gnomon._proto.gnomon.v1 import retry_pb2 as _retry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CancelOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANCEL_OUTCOME_UNSPECIFIED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_CANCELLED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_CANCEL_REQUESTED: _ClassVar[CancelOutcome]
    CANCEL_OUTCOME_ALREADY_FINISHED: _ClassVar[CancelOutcome]
CANCEL_OUTCOME_UNSPECIFIED: CancelOutcome
CANCEL_OUTCOME_CANCELLED: CancelOutcome
CANCEL_OUTCOME_CANCEL_REQUESTED: CancelOutcome
CANCEL_OUTCOME_ALREADY_FINISHED: CancelOutcome

class CreateJobRequest(_message.Message):
    __slots__ = ("parent", "queue", "payload", "schedule_time", "delay", "deadline", "max_attempts", "request_id", "idempotency_key", "lease_duration", "idempotent", "retry_policy", "start_to_close")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    queue: str
    payload: bytes
    schedule_time: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    deadline: _timestamp_pb2.Timestamp
    max_attempts: int
    request_id: str
    idempotency_key: str
    lease_duration: _duration_pb2.Duration
    idempotent: bool
    retry_policy: _retry_pb2.RetryPolicy
    start_to_close: _duration_pb2.Duration
    def __init__(self, parent: _Optional[str] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., schedule_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_attempts: _Optional[int] = ..., request_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idempotent: _Optional[bool] = ..., retry_policy: _Optional[_Union[_retry_pb2.RetryPolicy, _Mapping]] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("parent", "state", "queue", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    state: _job_pb2.JobState
    queue: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., state: _Optional[_Union[_job_pb2.JobState, str]] = ..., queue: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class BatchCreateJobsRequest(_message.Message):
    __slots__ = ("parent", "requests")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    parent: str
    requests: _containers.RepeatedCompositeFieldContainer[CreateJobRequest]
    def __init__(self, parent: _Optional[str] = ..., requests: _Optional[_Iterable[_Union[CreateJobRequest, _Mapping]]] = ...) -> None: ...

class BatchCreateJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_job_pb2.Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_job_pb2.Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("name", "expected_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_version: int
    def __init__(self, name: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job", "outcome")
    JOB_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    outcome: CancelOutcome
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., outcome: _Optional[_Union[CancelOutcome, str]] = ...) -> None: ...

class RescheduleJobRequest(_message.Message):
    __slots__ = ("name", "schedule_time", "delay", "expected_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    schedule_time: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    expected_version: int
    def __init__(self, name: _Optional[str] = ..., schedule_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class RescheduleJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobAttemptsRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobAttemptsResponse(_message.Message):
    __slots__ = ("attempts", "next_page_token")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[_job_pb2.JobAttempt]
    next_page_token: str
    def __init__(self, attempts: _Optional[_Iterable[_Union[_job_pb2.JobAttempt, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
