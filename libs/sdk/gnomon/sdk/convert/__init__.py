"""The one place where protobuf becomes Python (and back, for request fields).

* :mod:`.values`: well-known types and job states <-> plain values. Instants are **UTC-aware**
  ``datetime`` objects (naive ones are refused with ``ValueError``); spans are ``timedelta`` or
  ``int``/``float`` **seconds**; an unset message field maps to ``None``; job states are short
  upper-case strings (``"SCHEDULED"``).
* :mod:`.resources`: every resource message -> its frozen model (:mod:`gnomon.sdk.models`); enums
  become short names (``"COALESCE"``), unknown numbers ``"UNKNOWN_<n>"``.
"""

from .resources import (
    EnumType,
    audit_entry_from_proto,
    cancel_outcome,
    dead_letter_from_proto,
    dispatcher_from_proto,
    enum_text,
    fire_time_from_proto,
    job_attempt_from_proto,
    job_from_proto,
    occurrence_from_proto,
    prediction_from_proto,
    queue_from_proto,
    replay_result_from_proto,
    retry_policy_from_proto,
    retry_policy_to_proto,
    schedule_from_proto,
    shard_from_proto,
    template_from_proto,
)
from .values import (
    b64,
    decode_json_payload,
    duration_seconds,
    duration_text,
    encode_payload,
    field_duration,
    field_time,
    from_duration,
    from_timestamp,
    job_name,
    namespace_parent,
    rfc3339,
    state_name,
    state_value,
    to_duration,
    to_timestamp,
)

__all__ = [
    "to_timestamp",
    "from_timestamp",
    "to_duration",
    "from_duration",
    "duration_seconds",
    "field_time",
    "field_duration",
    "encode_payload",
    "decode_json_payload",
    "state_name",
    "state_value",
    "rfc3339",
    "duration_text",
    "b64",
    "job_name",
    "namespace_parent",
    "EnumType",
    "enum_text",
    "cancel_outcome",
    "job_from_proto",
    "job_attempt_from_proto",
    "retry_policy_from_proto",
    "retry_policy_to_proto",
    "dispatcher_from_proto",
    "shard_from_proto",
    "queue_from_proto",
    "dead_letter_from_proto",
    "audit_entry_from_proto",
    "replay_result_from_proto",
    "template_from_proto",
    "schedule_from_proto",
    "occurrence_from_proto",
    "prediction_from_proto",
    "fire_time_from_proto",
]
