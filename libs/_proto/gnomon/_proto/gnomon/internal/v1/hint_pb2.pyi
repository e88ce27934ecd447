import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WakePlannerRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: str
    def __init__(self, schedule: _Optional[str] = ...) -> None: ...

class WakePlannerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WakeDispatcherRequest(_message.Message):
    __slots__ = ("due_time",)
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    due_time: _timestamp_pb2.Timestamp
    def __init__(self, due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WakeDispatcherResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
