import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NamespaceQuotas(_message.Message):
    __slots__ = ("max_create_rate", "max_pending_jobs", "max_schedules", "max_worker_streams", "max_queues_per_hello", "max_worker_streams_per_principal", "max_queues_per_principal", "max_streamed_queues")
    MAX_CREATE_RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKER_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_PER_HELLO_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKER_STREAMS_PER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_PER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    max_create_rate: float
    max_pending_jobs: int
    max_schedules: int
    max_worker_streams: int
    max_queues_per_hello: int
    max_worker_streams_per_principal: int
    max_queues_per_principal: int
    max_streamed_queues: int
    def __init__(self, max_create_rate: _Optional[float] = ..., max_pending_jobs: _Optional[int] = ..., max_schedules: _Optional[int] = ..., max_worker_streams: _Optional[int] = ..., max_queues_per_hello: _Optional[int] = ..., max_worker_streams_per_principal: _Optional[int] = ..., max_queues_per_principal: _Optional[int] = ..., max_streamed_queues: _Optional[int] = ...) -> None: ...

class Namespace(_message.Message):
    __slots__ = ("name", "description", "retention", "quotas", "create_time", "update_time", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    retention: _duration_pb2.Duration
    quotas: NamespaceQuotas
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., retention: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., quotas: _Optional[_Union[NamespaceQuotas, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ...) -> None: ...

class CreateNamespaceRequest(_message.Message):
    __slots__ = ("namespace_id", "namespace")
    NAMESPACE_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace_id: str
    namespace: Namespace
    def __init__(self, namespace_id: _Optional[str] = ..., namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class CreateNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class GetNamespaceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ("namespaces", "next_page_token")
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[Namespace]
    next_page_token: str
    def __init__(self, namespaces: _Optional[_Iterable[_Union[Namespace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateNamespaceRequest(_message.Message):
    __slots__ = ("namespace", "update_mask")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class UpdateNamespaceResponse(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class DeleteNamespaceRequest(_message.Message):
    __slots__ = ("name", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteNamespaceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
