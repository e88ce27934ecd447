"""Checks every unary request applies before its handler runs (by :class:`gnomon.common.rpc.errors.
ErrorInterceptor`): no string field, at any depth, holds a NUL character.

PostgreSQL refuses NUL (U+0000) in ``text`` (psycopg raises before sending), so a NUL that reached a
query -- a list filter, a name, a reason -- used to surface as INTERNAL. No Gnomon string field
accepts NUL, so it is refused once here, for every method, as INVALID_ARGUMENT with a field violation
naming the field path (``schedule.job_template.queue``, ``requests[3].queue``, ``labels[k]``).
Protobuf already guarantees the rest of a string is valid UTF-8.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from gnomon.common.errors import FieldViolation

#: Most NUL violations reported for one request.
MAX_REPORTED = 10
#: Deepest message nesting walked (Gnomon requests nest 4 levels at most; deeper is not walked).
MAX_DEPTH = 16

_NUL = "\x00"
_DESCRIPTION = "must not contain a NUL character"


def nul_violations(msg: Message) -> list[FieldViolation]:
    """One violation per string field (or map key/value) of ``msg`` containing NUL, by field path;
    at most :data:`MAX_REPORTED`. Walks set fields only; never raises."""
    out: list[FieldViolation] = []
    _walk(msg, "", out, 0)
    return out


def _walk(msg: Message, prefix: str, out: list[FieldViolation], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    for field, value in msg.ListFields():
        if len(out) >= MAX_REPORTED:
            return
        path = f"{prefix}{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                for i, s in enumerate(value):
                    if _NUL in s:
                        out.append(FieldViolation(f"{path}[{i}]", _DESCRIPTION))
            elif _NUL in value:
                out.append(FieldViolation(path, _DESCRIPTION))
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                _walk_map(field, value, path, out, depth)
            elif field.is_repeated:
                for i, m in enumerate(value):
                    _walk(m, f"{path}[{i}].", out, depth + 1)
            else:
                _walk(value, f"{path}.", out, depth + 1)


def _walk_map(field: FieldDescriptor, value: Any, path: str, out: list[FieldViolation], depth: int) -> None:
    entry = field.message_type
    assert entry is not None  # a map field's entry type
    key_is_str = entry.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING
    val_field = entry.fields_by_name["value"]
    for k in value:
        if key_is_str and _NUL in k:
            out.append(FieldViolation(path, "keys " + _DESCRIPTION))
            continue
        v = value[k]
        if val_field.type == FieldDescriptor.TYPE_STRING and _NUL in v:
            out.append(FieldViolation(f"{path}[{k}]", _DESCRIPTION))
        elif val_field.type == FieldDescriptor.TYPE_MESSAGE:
            _walk(v, f"{path}[{k}].", out, depth + 1)
