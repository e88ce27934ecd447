"""Resource names (AIP-122): ``namespaces/{namespace}`` and ``namespaces/{namespace}/jobs/{job}``."""

from __future__ import annotations

import re
import uuid

from gnomon.common.errors import FieldViolation, InvalidArgument

NAMESPACE_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DEFAULT_NAMESPACE = "default"


def parse_parent(parent: str, field: str = "parent") -> str:
    """``namespaces/{ns}`` (or empty for ``default``) -> ``ns``; INVALID_ARGUMENT otherwise."""
    if not parent:
        return DEFAULT_NAMESPACE
    parts = parent.split("/")
    if len(parts) != 2 or parts[0] != "namespaces" or not NAMESPACE_RE.fullmatch(parts[1]):
        raise InvalidArgument(
            [
                FieldViolation(
                    field,
                    "must be namespaces/{namespace}, namespace matching "
                    "[a-z0-9-]{1,63} (no leading/trailing '-')",
                )
            ]
        )
    return parts[1]


def parse_job_name(name: str, field: str = "name") -> tuple[str, uuid.UUID]:
    """``namespaces/{ns}/jobs/{uuid}`` -> ``(ns, uuid)``; INVALID_ARGUMENT otherwise."""
    parts = name.split("/")
    if (
        len(parts) == 4
        and parts[0] == "namespaces"
        and parts[2] == "jobs"
        and NAMESPACE_RE.fullmatch(parts[1])
    ):
        try:
            return parts[1], uuid.UUID(parts[3])
        except ValueError:
            pass
    raise InvalidArgument([FieldViolation(field, "must be namespaces/{namespace}/jobs/{job-uuid}")])


def job_name(namespace: str, job_id: uuid.UUID) -> str:
    """The resource name of a job."""
    return f"namespaces/{namespace}/jobs/{job_id}"


SCHEDULE_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def parse_schedule_name(name: str, field: str = "name") -> tuple[str, str]:
    """``namespaces/{ns}/schedules/{id}`` -> ``(ns, id)``; INVALID_ARGUMENT otherwise. (Server-assigned
    ids are UUIDs, which this pattern accepts too.)"""
    parts = name.split("/")
    if (
        len(parts) == 4
        and parts[0] == "namespaces"
        and parts[2] == "schedules"
        and NAMESPACE_RE.fullmatch(parts[1])
        and SCHEDULE_ID_RE.fullmatch(parts[3])
    ):
        return parts[1], parts[3]
    raise InvalidArgument([FieldViolation(field, "must be namespaces/{namespace}/schedules/{schedule}")])
