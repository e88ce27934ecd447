"""Resource names (AIP-122), formatted and parsed here and nowhere else.

Every resource lives in a namespace: ``namespaces/{namespace}``, ``namespaces/{namespace}/jobs/{job}``
(a UUID), ``namespaces/{namespace}/schedules/{schedule}``, ``namespaces/{namespace}/queues/{queue}``,
``namespaces/{namespace}/jobs/{job}/attempts/{n}``, ``namespaces/{namespace}/auditEntries/{entry}``
(a UUID). A parse error is ``INVALID_ARGUMENT`` with
one field violation on the request field that carried the name (``field``).

Limits: a namespace or schedule id is 1-63 characters of ``[a-z0-9-]``, not starting or ending with
``-`` (server-assigned schedule ids are UUIDs, which fit); a queue is 1-64 characters of
``[a-z0-9._-]`` starting with a letter or digit.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from gnomon.common.errors import FieldViolation, InvalidArgument

NAMESPACE_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
SCHEDULE_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
QUEUE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: The namespace of a request whose ``parent`` is empty.
DEFAULT_NAMESPACE = "default"

_NAMESPACES = "namespaces"
_PRINCIPALS = "principals"
#: A principal id: 1-128 printable ASCII characters without ``/`` or spaces.
PRINCIPAL_ID_RE = re.compile(r"^[\x21-\x2e\x30-\x7e]{1,128}$")
#: An API key id: 16 lowercase hex digits.
API_KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")


# ---- formatting ---------------------------------------------------------------------------------


def namespace_name(namespace: str) -> str:
    """``namespaces/{namespace}``."""
    return f"{_NAMESPACES}/{namespace}"


def job_name(namespace: str, job_id: uuid.UUID | str) -> str:
    """``namespaces/{namespace}/jobs/{job_id}``."""
    return f"{_NAMESPACES}/{namespace}/jobs/{job_id}"


def attempt_name(namespace: str, job_id: uuid.UUID | str, attempt: int) -> str:
    """``namespaces/{namespace}/jobs/{job_id}/attempts/{attempt}`` (attempts are numbered from 1)."""
    return f"{job_name(namespace, job_id)}/attempts/{attempt}"


def schedule_name(namespace: str, schedule_id: str) -> str:
    """``namespaces/{namespace}/schedules/{schedule_id}``."""
    return f"{_NAMESPACES}/{namespace}/schedules/{schedule_id}"


def occurrence_name(schedule: str, nominal: datetime) -> str:
    """``{schedule}/occurrences/{nominal}``: ``schedule`` is a schedule's name, ``nominal`` an aware
    instant written as UTC with microseconds (``2026-12-01T10:00:00.000000Z``)."""
    return f"{schedule}/occurrences/{nominal.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def queue_name(namespace: str, queue: str) -> str:
    """``namespaces/{namespace}/queues/{queue}``."""
    return f"{_NAMESPACES}/{namespace}/queues/{queue}"


def audit_entry_name(namespace: str, entry_id: uuid.UUID | str) -> str:
    """``namespaces/{namespace}/auditEntries/{entry_id}``."""
    return f"{_NAMESPACES}/{namespace}/auditEntries/{entry_id}"


def principal_name(principal: str) -> str:
    """``principals/{principal}``."""
    return f"{_PRINCIPALS}/{principal}"


def api_key_name(principal: str, key_id: str) -> str:
    """``principals/{principal}/apiKeys/{key_id}``."""
    return f"{_PRINCIPALS}/{principal}/apiKeys/{key_id}"


# ---- parsing ------------------------------------------------------------------------------------


def _invalid(field: str, description: str) -> InvalidArgument:
    return InvalidArgument([FieldViolation(field, description)])


def _split(name: str, collection: str) -> tuple[str, str] | None:
    """``namespaces/{ns}/{collection}/{id}`` with a valid namespace -> ``(ns, id)``, else None."""
    parts = name.split("/")
    if (
        len(parts) == 4
        and parts[0] == _NAMESPACES
        and parts[2] == collection
        and NAMESPACE_RE.fullmatch(parts[1])
    ):
        return parts[1], parts[3]
    return None


def parse_parent(parent: str, field: str = "parent") -> str:
    """``namespaces/{ns}`` -> ``ns``; an empty parent is :data:`DEFAULT_NAMESPACE`.
    Raises :class:`InvalidArgument` on ``field`` otherwise."""
    if not parent:
        return DEFAULT_NAMESPACE
    parts = parent.split("/")
    if len(parts) != 2 or parts[0] != _NAMESPACES or not NAMESPACE_RE.fullmatch(parts[1]):
        raise _invalid(
            field,
            "must be namespaces/{namespace}, namespace matching [a-z0-9-]{1,63} (no leading/trailing '-')",
        )
    return parts[1]


def parse_job_name(name: str, field: str = "name") -> tuple[str, uuid.UUID]:
    """``namespaces/{ns}/jobs/{uuid}`` -> ``(ns, uuid)``; raises :class:`InvalidArgument` on ``field``
    otherwise."""
    split = _split(name, "jobs")
    if split is not None:
        try:
            return split[0], uuid.UUID(split[1])
        except ValueError:
            pass
    raise _invalid(field, "must be namespaces/{namespace}/jobs/{job-uuid}")


def parse_schedule_name(name: str, field: str = "name") -> tuple[str, str]:
    """``namespaces/{ns}/schedules/{id}`` -> ``(ns, id)``; raises :class:`InvalidArgument` on ``field``
    otherwise."""
    split = _split(name, "schedules")
    if split is not None and SCHEDULE_ID_RE.fullmatch(split[1]):
        return split
    raise _invalid(field, "must be namespaces/{namespace}/schedules/{schedule}")


def parse_queue_name(name: str, field: str = "name") -> tuple[str, str]:
    """``namespaces/{ns}/queues/{queue}`` -> ``(ns, queue)``; raises :class:`InvalidArgument` on
    ``field`` otherwise."""
    split = _split(name, "queues")
    if split is not None and QUEUE_RE.fullmatch(split[1]):
        return split
    raise _invalid(
        field,
        "must be namespaces/{namespace}/queues/{queue}, queue 1-64 characters of [a-z0-9._-] "
        "starting with a letter or digit",
    )


def namespace_of(name: str, *, parent: bool = False) -> str | None:
    """The namespace that ``name`` names: a parent (``namespaces/{ns}``; empty means
    :data:`DEFAULT_NAMESPACE` when ``parent``) or a resource name under it (``namespaces/{ns}/{kind}/{id}``).
    None when ``name`` is malformed or empty (the handler then reports the field). The authorization
    seam uses it, so names are never parsed a second way."""
    if not name:
        return DEFAULT_NAMESPACE if parent else None
    parts = name.split("/")
    if len(parts) in (2, 4) and parts[0] == _NAMESPACES and NAMESPACE_RE.fullmatch(parts[1]):
        return parts[1]
    return None


def parse_namespace_name(name: str, field: str = "name") -> str:
    """``namespaces/{ns}`` -> ``ns`` (no empty default); raises :class:`InvalidArgument` on ``field``
    otherwise."""
    if not name:
        raise _invalid(field, "must be namespaces/{namespace}")
    return parse_parent(name, field)


def parse_principal_name(name: str, field: str = "name") -> str:
    """``principals/{principal}`` -> the principal id; raises :class:`InvalidArgument` on ``field``
    otherwise."""
    head, sep, pid = name.partition("/")
    if head == _PRINCIPALS and sep and PRINCIPAL_ID_RE.fullmatch(pid):
        return pid
    raise _invalid(
        field,
        "must be principals/{principal}, principal 1-128 printable ASCII characters without '/' or spaces",
    )


def parse_api_key_name(name: str, field: str = "name") -> tuple[str, str]:
    """``principals/{principal}/apiKeys/{id}`` -> ``(principal, id)``; raises :class:`InvalidArgument`
    on ``field`` otherwise."""
    parts = name.split("/")
    if (
        len(parts) == 4
        and parts[0] == _PRINCIPALS
        and PRINCIPAL_ID_RE.fullmatch(parts[1])
        and parts[2] == "apiKeys"
        and API_KEY_ID_RE.fullmatch(parts[3])
    ):
        return parts[1], parts[3]
    raise _invalid(field, "must be principals/{principal}/apiKeys/{16 hex digits}")
