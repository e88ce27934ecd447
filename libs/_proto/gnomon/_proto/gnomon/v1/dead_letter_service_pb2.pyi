import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from gnomon._proto.gnomon.v1 import failure_class_pb2 as _failure_class_pb2
from gnomon._proto.gnomon.v1 import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeadLetterAttempt(_message.Message):
    __slots__ = ("attempt", "state", "failure_class", "error", "worker_id", "fencing_token", "claim_time", "start_time", "finish_time")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    state: str
    failure_class: _failure_class_pb2.FailureClass
    error: str
    worker_id: str
    fencing_token: int
    claim_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    def __init__(self, attempt: _Optional[int] = ..., state: _Optional[str] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., error: _Optional[str] = ..., worker_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., claim_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("job", "attempts", "replay_of", "replayed_by")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_OF_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_BY_FIELD_NUMBER: _ClassVar[int]
    job: _job_pb2.Job
    attempts: _containers.RepeatedCompositeFieldContainer[DeadLetterAttempt]
    replay_of: str
    replayed_by: str
    def __init__(self, job: _Optional[_Union[_job_pb2.Job, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[DeadLetterAttempt, _Mapping]]] = ..., replay_of: _Optional[str] = ..., replayed_by: _Optional[str] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("parent", "queue", "failure_class", "error_contains", "start_time", "end_time", "include_replayed", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REPLAYED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    queue: str
    failure_class: _failure_class_pb2.FailureClass
    error_contains: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    include_replayed: bool
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., queue: _Optional[str] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., error_contains: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., include_replayed: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReplayDeadLettersRequest(_message.Message):
    __slots__ = ("parent", "queue", "failure_class", "error_contains", "start_time", "end_time", "max_rate", "max_jobs", "dry_run", "reason", "request_id")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    parent: str
    queue: str
    failure_class: _failure_class_pb2.FailureClass
    error_contains: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    max_rate: float
    max_jobs: int
    dry_run: bool
    reason: str
    request_id: str
    def __init__(self, parent: _Optional[str] = ..., queue: _Optional[str] = ..., failure_class: _Optional[_Union[_failure_class_pb2.FailureClass, str]] = ..., error_contains: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_rate: _Optional[float] = ..., max_jobs: _Optional[int] = ..., dry_run: _Optional[bool] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReplayDeadLettersResponse(_message.Message):
    __slots__ = ("matched_count", "replayed_count", "replayed_jobs", "dry_run")
    MATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_JOBS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    matched_count: int
    replayed_count: int
    replayed_jobs: _containers.RepeatedScalarFieldContainer[str]
    dry_run: bool
    def __init__(self, matched_count: _Optional[int] = ..., replayed_count: _Optional[int] = ..., replayed_jobs: _Optional[_Iterable[str]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ListAuditEntriesRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("name", "create_time", "actor", "action", "reason", "request_id", "details", "resource", "outcome", "peer", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    create_time: _timestamp_pb2.Timestamp
    actor: str
    action: str
    reason: str
    request_id: str
    details: str
    resource: str
    outcome: str
    peer: str
    count: int
    def __init__(self, name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., action: _Optional[str] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ..., details: _Optional[str] = ..., resource: _Optional[str] = ..., outcome: _Optional[str] = ..., peer: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ListAuditEntriesResponse(_message.Message):
    __slots__ = ("audit_entries", "next_page_token")
    AUDIT_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    audit_entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_page_token: str
    def __init__(self, audit_entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
