import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState

class RateLimit(_message.Message):
    __slots__ = ("rate", "burst", "available")
    RATE_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    rate: float
    burst: int
    available: float
    def __init__(self, rate: _Optional[float] = ..., burst: _Optional[int] = ..., available: _Optional[float] = ...) -> None: ...

class SetQueueRateLimitRequest(_message.Message):
    __slots__ = ("name", "rate", "burst")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    name: str
    rate: float
    burst: int
    def __init__(self, name: _Optional[str] = ..., rate: _Optional[float] = ..., burst: _Optional[int] = ...) -> None: ...

class SetQueueRateLimitResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class RetryBudget(_message.Message):
    __slots__ = ("used", "allowed", "first_attempts", "window")
    USED_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    used: int
    allowed: int
    first_attempts: int
    window: _duration_pb2.Duration
    def __init__(self, used: _Optional[int] = ..., allowed: _Optional[int] = ..., first_attempts: _Optional[int] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "region", "breaker_state", "opened_time", "breaker_update_time", "failure_ratio", "window_results", "retry_budget", "due_jobs", "due_jobs_truncated", "oldest_due_age", "rate_limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    BREAKER_STATE_FIELD_NUMBER: _ClassVar[int]
    OPENED_TIME_FIELD_NUMBER: _ClassVar[int]
    BREAKER_UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_RATIO_FIELD_NUMBER: _ClassVar[int]
    WINDOW_RESULTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    DUE_JOBS_FIELD_NUMBER: _ClassVar[int]
    DUE_JOBS_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_DUE_AGE_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    region: str
    breaker_state: BreakerState
    opened_time: _timestamp_pb2.Timestamp
    breaker_update_time: _timestamp_pb2.Timestamp
    failure_ratio: float
    window_results: int
    retry_budget: RetryBudget
    due_jobs: int
    due_jobs_truncated: bool
    oldest_due_age: _duration_pb2.Duration
    rate_limit: RateLimit
    def __init__(self, name: _Optional[str] = ..., region: _Optional[str] = ..., breaker_state: _Optional[_Union[BreakerState, str]] = ..., opened_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., breaker_update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_ratio: _Optional[float] = ..., window_results: _Optional[int] = ..., retry_budget: _Optional[_Union[RetryBudget, _Mapping]] = ..., due_jobs: _Optional[int] = ..., due_jobs_truncated: _Optional[bool] = ..., oldest_due_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., rate_limit: _Optional[_Union[RateLimit, _Mapping]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...
