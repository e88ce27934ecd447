"""Dead letters and their replay, as values (docs/concepts.md, "Vocabulary", "DLQ"): which dead letters a call
means (:class:`DeadLetterFilter`), a validated replay request (:class:`ReplayRequest`) and what a
replay did (:class:`ReplayOutcome`). The queries are :mod:`gnomon.common.storage.dead_letters`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters: one namespace, optionally one queue, one failure class, a case-insensitive
    substring of ``last_error``, and a ``finished_at`` range ``[start_time, end_time)`` (UTC)."""

    namespace: str
    queue: str | None = None
    failure_class: str | None = None
    error_contains: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """The filter as a JSON-ready dict (for the audit log)."""
        return {
            "queue": self.queue,
            "failure_class": self.failure_class,
            "error_contains": self.error_contains,
            "start_time": self.start_time.isoformat() if self.start_time else None,
            "end_time": self.end_time.isoformat() if self.end_time else None,
        }


@dataclass(frozen=True)
class ReplayRequest:
    """A validated ReplayDeadLetters call. ``request_hash`` fingerprints every field but ``reason``;
    ``actor`` is the authenticated principal (never client-claimed); ``audit_extra`` goes into the audit
    entry's details (e.g. ``peer``, ``principal_kind``)."""

    filter: DeadLetterFilter
    max_rate: float
    max_jobs: int
    dry_run: bool
    reason: str
    request_id: uuid.UUID
    request_hash: str
    actor: str
    audit_extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayOutcome:
    """What a replay did (so far): ``matched`` dead letters at its start (capped at
    :data:`MAX_MATCH_COUNT`), ``replayed`` new jobs, the names of the first :data:`MAX_JOB_NAMES`
    of them in schedule order; ``done`` once nothing is left to replay."""

    matched: int
    replayed: int
    job_names: list[str]
    dry_run: bool
    done: bool
