import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListDispatchersRequest(_message.Message):
    __slots__ = ("region",)
    REGION_FIELD_NUMBER: _ClassVar[int]
    region: str
    def __init__(self, region: _Optional[str] = ...) -> None: ...

class Dispatcher(_message.Message):
    __slots__ = ("dispatcher_id", "region", "address")
    DISPATCHER_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    dispatcher_id: str
    region: str
    address: str
    def __init__(self, dispatcher_id: _Optional[str] = ..., region: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class ListDispatchersResponse(_message.Message):
    __slots__ = ("dispatchers",)
    DISPATCHERS_FIELD_NUMBER: _ClassVar[int]
    dispatchers: _containers.RepeatedCompositeFieldContainer[Dispatcher]
    def __init__(self, dispatchers: _Optional[_Iterable[_Union[Dispatcher, _Mapping]]] = ...) -> None: ...

class ListShardsRequest(_message.Message):
    __slots__ = ("region",)
    REGION_FIELD_NUMBER: _ClassVar[int]
    region: str
    def __init__(self, region: _Optional[str] = ...) -> None: ...

class Shard(_message.Message):
    __slots__ = ("region", "shard", "owner", "fencing_token", "recorded_token", "acquire_time", "owned")
    REGION_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECORDED_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    region: str
    shard: int
    owner: str
    fencing_token: int
    recorded_token: int
    acquire_time: _timestamp_pb2.Timestamp
    owned: bool
    def __init__(self, region: _Optional[str] = ..., shard: _Optional[int] = ..., owner: _Optional[str] = ..., fencing_token: _Optional[int] = ..., recorded_token: _Optional[int] = ..., acquire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., owned: _Optional[bool] = ...) -> None: ...

class ListShardsResponse(_message.Message):
    __slots__ = ("shards",)
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[Shard]
    def __init__(self, shards: _Optional[_Iterable[_Union[Shard, _Mapping]]] = ...) -> None: ...
