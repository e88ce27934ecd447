from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class FailureClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_CLASS_UNSPECIFIED: _ClassVar[FailureClass]
    FAILURE_CLASS_TRANSIENT: _ClassVar[FailureClass]
    FAILURE_CLASS_THROTTLED: _ClassVar[FailureClass]
    FAILURE_CLASS_PERMANENT: _ClassVar[FailureClass]
    FAILURE_CLASS_AMBIGUOUS: _ClassVar[FailureClass]
FAILURE_CLASS_UNSPECIFIED: FailureClass
FAILURE_CLASS_TRANSIENT: FailureClass
FAILURE_CLASS_THROTTLED: FailureClass
FAILURE_CLASS_PERMANENT: FailureClass
FAILURE_CLASS_AMBIGUOUS: FailureClass
