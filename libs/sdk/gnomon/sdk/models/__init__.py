"""Typed, frozen views of every resource the SDK returns (no protobuf message and no dict leaves the
client). They are built from protobuf in one place, :mod:`gnomon.sdk.convert`; presentation (tables,
JSON for the command line) lives in :mod:`gnomon.cli.render`.

Conventions: instants are UTC-aware ``datetime`` (``None`` when unset), spans ``timedelta`` (``None``
when unset), enums short upper-case names (``"SCHEDULED"``, ``"COALESCE"``; ``"UNKNOWN_<n>"`` for a
number this SDK does not know), resource names full (``namespaces/{ns}/...``).
"""

from .access import ApiKey, CreatedApiKey, Grant, Namespace, NamespaceQuotas, Principal, WhoAmI
from .cluster import DispatcherInfo, Shard
from .dead_letters import AuditEntry, DeadLetter, DeadLetterAttempt, ReplayResult
from .jobs import CANCEL_OUTCOMES, TERMINAL_STATES, Job, JobAttempt, RetryPolicy
from .queues import Queue, RateLimit, RetryBudgetInfo
from .schedules import (
    JobTemplate,
    OutagePrediction,
    PreviewFireTime,
    Schedule,
    ScheduleOccurrence,
    SkippedOccurrenceRange,
)

__all__ = [
    "Job",
    "JobAttempt",
    "RetryPolicy",
    "CANCEL_OUTCOMES",
    "TERMINAL_STATES",
    "DispatcherInfo",
    "Shard",
    "Queue",
    "RetryBudgetInfo",
    "RateLimit",
    "DeadLetter",
    "DeadLetterAttempt",
    "ReplayResult",
    "AuditEntry",
    "Schedule",
    "JobTemplate",
    "ScheduleOccurrence",
    "PreviewFireTime",
    "OutagePrediction",
    "SkippedOccurrenceRange",
    "Namespace",
    "NamespaceQuotas",
    "Principal",
    "ApiKey",
    "CreatedApiKey",
    "Grant",
    "WhoAmI",
]
