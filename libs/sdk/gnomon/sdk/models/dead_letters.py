"""The dead-letter queue (``DeadLetterService``): dead letters, replay results, audit entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..failures import FailureClass
from .jobs import Job

__all__ = ["DeadLetter", "DeadLetterAttempt", "ReplayResult", "AuditEntry"]


@dataclass(frozen=True, slots=True)
class DeadLetterAttempt:
    """One attempt of a dead letter (mirror of ``gnomon.v1.DeadLetterAttempt``): ``attempt``
    (1-based), ``state`` (QUEUED RUNNING SUCCEEDED FAILED LOST CANCELLED), ``failure_class``
    (a :class:`~gnomon.sdk.FailureClass`, ``None`` if it did not fail), ``error``, ``worker_id`` ("" if never accepted), ``fencing_token``, and UTC ``claim_time``,
    ``start_time``, ``finish_time`` (``None`` when unset)."""

    attempt: int
    state: str
    failure_class: FailureClass | None
    error: str
    worker_id: str
    fencing_token: int
    claim_time: datetime | None
    start_time: datetime | None
    finish_time: datetime | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead job with its most recent attempts (at most 10, oldest first). ``replay_of``: the job it
    was itself replayed from ("" if none); ``replayed_by``: the job replaying it ("" if not yet)."""

    job: Job
    attempts: list[DeadLetterAttempt]
    replay_of: str = ""
    replayed_by: str = ""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What ``replay_dead_letters`` did: ``matched`` dead letters (counted up to 100000),
    ``replayed`` new jobs (0 for a dry run), the names of the first 1000 in schedule order,
    ``dry_run``, and the ``request_id`` used (repeat the call with it to get the same answer, or to
    finish an interrupted replay)."""

    matched: int
    replayed: int
    job_names: list[str]
    dry_run: bool
    request_id: str


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit log entry: ``name``, UTC ``create_time``, ``actor`` (the authenticated principal),
    ``action`` (the method, e.g. ``CreateJob``, or ``dead_letters.replay[.dry_run]``), ``reason``,
    ``request_id``, ``details`` (the decoded JSON object: for a replay its filter, limits, counts),
    ``resource`` (the resource name acted on), ``outcome`` (a gRPC status code name), ``peer`` and
    ``count``: how many calls the entry stands for (1, or more for refused calls the server coalesced;
    ``create_time`` is then the first, ``details["last_time"]`` the last)."""

    name: str
    create_time: datetime | None
    actor: str
    action: str
    reason: str
    request_id: str
    details: dict[str, Any]
    resource: str = ""
    outcome: str = ""
    peer: str = ""
    count: int = 1
