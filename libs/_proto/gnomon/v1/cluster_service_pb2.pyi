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
