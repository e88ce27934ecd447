import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import failure_class_pb2 as _failure_class_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_SUCCEEDED: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]

class AckKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_KIND_UNSPECIFIED: _ClassVar[AckKind]
    ACK_KIND_ACCEPT: _ClassVar[AckKind]
    ACK_KIND_HEARTBEAT: _ClassVar[AckKind]
    ACK_KIND_RESULT: _ClassVar[AckKind]
    ACK_KIND_RELEASE: _ClassVar[AckKind]
    ACK_KIND_CHECKPOINT: _ClassVar[AckKind]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_SUCCEEDED: Outcome
OUTCOME_FAILED: Outcome
ACK_KIND_UNSPECIFIED: AckKind
ACK_KIND_ACCEPT: AckKind
ACK_KIND_HEARTBEAT: AckKind
ACK_KIND_RESULT: AckKind
ACK_KIND_RELEASE: AckKind
ACK_KIND_CHECKPOINT: AckKind

class LeaseRequest(_message.Message):
    __slots__ = ("hello", "credits", "accepts", "heartbeats", "results", "releases")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    hello: WorkerHello
    credits: WorkerCredits
    accepts: AttemptRefs
    heartbeats: Heartbeats
    results: AttemptResults
    releases: AttemptRefs
    def __init__(self, hello: _Optional[_Union[WorkerHello, _Mapping]] = ..., credits: _Optional[_Union[WorkerCredits, _Mapping]] = ..., accepts: _Optional[_Union[AttemptRefs, _Mapping]] = ..., heartbeats: _Optional[_Union[Heartbeats, _Mapping]] = ..., results: _Optional[_Union[AttemptResults, _Mapping]] = ..., releases: _Optional[_Union[AttemptRefs, _Mapping]] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("welcome", "assignments", "acks")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    welcome: DispatcherWelcome
    assignments: Assignments
    acks: Acks
    def __init__(self, welcome: _Optional[_Union[DispatcherWelcome, _Mapping]] = ..., assignments: _Optional[_Union[Assignments, _Mapping]] = ..., acks: _Optional[_Union[Acks, _Mapping]] = ...) -> None: ...

class WorkerHello(_message.Message):
    __slots__ = ("worker_id", "namespace", "queues", "credits")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    namespace: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    credits: int
    def __init__(self, worker_id: _Optional[str] = ..., namespace: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., credits: _Optional[int] = ...) -> None: ...

class WorkerCredits(_message.Message):
    __slots__ = ("credits",)
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    credits: int
    def __init__(self, credits: _Optional[int] = ...) -> None: ...

class AttemptRef(_message.Message):
    __slots__ = ("job", "attempt", "version", "fencing_token", "job_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    version: int
    fencing_token: int
    job_id: bytes
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., version: _Optional[int] = ..., fencing_token: _Optional[int] = ..., job_id: _Optional[bytes] = ...) -> None: ...

class AttemptRefs(_message.Message):
    __slots__ = ("attempts",)
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptRef]
    def __init__(self, attempts: _Optional[_Iterable[_Union[AttemptRef, _Mapping]]] = ...) -> None: ...

class Heartbeats(_message.Message):
    __slots__ = ("attempts", "checkpoints")
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptRef]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, attempts: _Optional[_Iterable[_Union[AttemptRef, _Mapping]]] = ..., checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("attempt", "data")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    attempt: AttemptRef
    data: bytes
    def __init__(self, attempt: _Optional[_Union[AttemptRef, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class AttemptResult(_message.Message):
    __slots__ = ("attempt", "outcome", "failure_class", "error", "retry_after")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    attempt: AttemptRef
    outcome: Outcome
    failure_class: _failure_class_pb2.FailureClass
    error: str
    retry_after: _duration_pb2.Duration
    def __init__(self, attempt: _Optional[_Union[AttemptRef, _Mapping]] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., error: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AttemptResults(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AttemptResult]
    def __init__(self, results: _Optional[_Iterable[_Union[AttemptResult, _Mapping]]] = ...) -> None: ...

class DispatcherWelcome(_message.Message):
    __slots__ = ("dispatcher_id", "region", "heartbeat_interval")
    DISPATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    dispatcher_id: str
    region: str
    heartbeat_interval: _duration_pb2.Duration
    def __init__(self, dispatcher_id: _Optional[str] = ..., region: _Optional[str] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("attempt", "queue", "payload", "idempotency_key", "lease_expire_time", "schedule_time", "deadline", "max_attempts", "lease_duration", "checkpoint", "start_to_close", "schedule", "nominal_time", "coalesced_count", "coalesced_first_time", "coalesced_last_time", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    COALESCED_COUNT_FIELD_NUMBER: _ClassVar[int]
    COALESCED_FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    COALESCED_LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    attempt: AttemptRef
    queue: str
    payload: bytes
    idempotency_key: str
    lease_expire_time: _timestamp_pb2.Timestamp
    schedule_time: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    max_attempts: int
    lease_duration: _duration_pb2.Duration
    checkpoint: bytes
    start_to_close: _duration_pb2.Duration
    schedule: str
    nominal_time: _timestamp_pb2.Timestamp
    coalesced_count: int
    coalesced_first_time: _timestamp_pb2.Timestamp
    coalesced_last_time: _timestamp_pb2.Timestamp
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, attempt: _Optional[_Union[AttemptRef, _Mapping]] = ..., queue: _Optional[str] = ..., payload: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schedule_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_attempts: _Optional[int] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., checkpoint: _Optional[bytes] = ..., start_to_close: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., schedule: _Optional[str] = ..., nominal_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., coalesced_count: _Optional[int] = ..., coalesced_first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., coalesced_last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Assignments(_message.Message):
    __slots__ = ("assignments",)
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("attempt", "kind", "ok", "reason", "lease_expire_time", "cancel_requested")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    attempt: AttemptRef
    kind: AckKind
    ok: bool
    reason: str
    lease_expire_time: _timestamp_pb2.Timestamp
    cancel_requested: bool
    def __init__(self, attempt: _Optional[_Union[AttemptRef, _Mapping]] = ..., kind: _Optional[_Union[AckKind, str]] = ..., ok: _Optional[bool] = ..., reason: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class Acks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    def __init__(self, acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ...) -> None: ...
