"""Jobs, their attempts and retry policies (``JobService``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..failures import FailureClass

__all__ = ["Job", "JobAttempt", "RetryPolicy", "CANCEL_OUTCOMES", "TERMINAL_STATES"]

Span = timedelta | float | int

#: Job states after which nothing changes any more.
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "EXPIRED", "SKIPPED"})

#: What :meth:`gnomon.sdk.Client.cancel_job` reports: the job was cancelled (it was SCHEDULED or
#: QUEUED), its cancellation was requested (RUNNING: the worker is told; the job ends SUCCEEDED if the
#: handler still succeeds, else CANCELLED), or it had finished already (nothing changed).
CANCEL_OUTCOMES = ("CANCELLED", "CANCEL_REQUESTED", "ALREADY_FINISHED")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How the failed attempts of a job are retried; ``None`` fields take the server's defaults.

    Attributes:
        initial_backoff: backoff before the first retry (``timedelta`` or seconds; default 1 s).
        max_backoff: cap of any backoff (default 300 s, at most 1 day).
        multiplier: growth per retry, 1-10 (default 2).
        jitter: randomized fraction of each delay, 0-1 (default 1: full jitter; 0: none).
        max_age: no retry starts later than this after the first attempt was dispatched
            (default: no limit); the job goes to the DLQ instead.
        non_retryable_errors: error type names (e.g. ``"ValueError"``) never retried: a failure
            whose error text is ``"<name>"`` or starts with ``"<name>:"`` (the SDK reports
            ``"ExcType: message"``) goes to the DLQ at once.

    The server checks the values (INVALID_ARGUMENT with violations ``retry_policy.<field>``).
    """

    initial_backoff: Span | None = None
    max_backoff: Span | None = None
    multiplier: float | None = None
    jitter: float | None = None
    max_age: Span | None = None
    non_retryable_errors: tuple[str, ...] | list[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Job:
    """A job as returned by the API (mirror of ``gnomon.v1.Job``).

    Attributes:
        name: ``namespaces/{namespace}/jobs/{id}``.
        queue: queue name.
        payload: opaque payload bytes (see :meth:`json`).
        state: short state name: ``"SCHEDULED"``, ``"QUEUED"``, ``"RUNNING"``, ``"SUCCEEDED"``,
            ``"FAILED"``, ``"DEAD"``, ``"CANCELLED"``, ``"EXPIRED"``, ``"SKIPPED"``
            (``"UNSPECIFIED"``/``"UNKNOWN_<n>"`` only for values this SDK does not know).
        version: bumped by every state transition.
        schedule_time: UTC-aware instant from which the job may run.
        deadline: UTC-aware instant past which an undispatched job expires, or ``None``.
        max_attempts: upper bound on attempts (first try included).
        attempt: current/last attempt number, 1-based; 0 before the first claim.
        idempotency_key: key handed to every attempt.
        create_time, dispatch_time, start_time, finish_time: UTC-aware datetimes or ``None``.
        last_error: last error reported by a worker ("" when none).
        region: home region.
        request_id: the create's ``request_id`` ("" when none).
        lease_duration: lease granted per attempt (``timedelta``) or ``None``.
        idempotent: an attempt with an unknown outcome may be retried.
        failure_class: the :class:`~gnomon.sdk.FailureClass` of the last failure, ``None`` if none.
        retry_policy: the :class:`~gnomon.sdk.RetryPolicy` in effect (defaults filled in by the
            server), or ``None`` from a server that does not send it.
    """

    name: str
    queue: str
    payload: bytes
    state: str
    version: int
    schedule_time: datetime | None
    deadline: datetime | None
    max_attempts: int
    attempt: int
    idempotency_key: str
    create_time: datetime | None
    dispatch_time: datetime | None
    start_time: datetime | None
    finish_time: datetime | None
    last_error: str
    region: str
    request_id: str
    lease_duration: timedelta | None
    idempotent: bool = False
    failure_class: FailureClass | None = None
    retry_policy: RetryPolicy | None = None

    @property
    def id(self) -> str:
        """The job id (last segment of :attr:`name`)."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> str:
        """The namespace id (``x`` in ``namespaces/x/jobs/...``); "" if the name is malformed."""
        parts = self.name.split("/")
        return parts[1] if len(parts) >= 2 and parts[0] == "namespaces" else ""

    @property
    def terminal(self) -> bool:
        """True if :attr:`state` is terminal (SUCCEEDED, FAILED, DEAD, CANCELLED, EXPIRED, SKIPPED)."""
        return self.state in TERMINAL_STATES

    def json(self) -> Any:
        """The payload decoded as UTF-8 JSON.

        Raises:
            ValueError: the payload is not UTF-8 JSON.
        """
        return json.loads(self.payload.decode("utf-8"))


@dataclass(frozen=True, slots=True)
class JobAttempt:
    """One attempt of a job, as listed by :meth:`Client.list_job_attempts` (mirror of
    ``gnomon.v1.JobAttempt``).

    Attributes:
        name: ``namespaces/{namespace}/jobs/{id}/attempts/{attempt}``.
        attempt: 1-based attempt number.
        state: ``"QUEUED"``, ``"RUNNING"``, ``"SUCCEEDED"``, ``"FAILED"``, ``"LOST"`` (lease
            expired while running: outcome unknown) or ``"CANCELLED"``.
        worker_id: the worker that accepted it ("" if none did).
        dispatcher_id: the dispatcher that claimed it.
        fencing_token: token it was claimed (or re-published) under.
        version: job version at claim.
        failure_class: for FAILED/LOST attempts the :class:`~gnomon.sdk.FailureClass` (LOST:
            always ``AMBIGUOUS``); else ``None``.
        error: for FAILED/LOST attempts the error text; else "".
        claim_time, accept_time, finish_time, lease_expire_time: UTC-aware datetimes or ``None``.
        cancel_requested: cancellation of this attempt was requested while it ran.
    """

    name: str
    attempt: int
    state: str
    worker_id: str
    dispatcher_id: str
    fencing_token: int
    version: int
    failure_class: FailureClass | None
    error: str
    claim_time: datetime | None
    accept_time: datetime | None
    finish_time: datetime | None
    lease_expire_time: datetime | None
    cancel_requested: bool = False

    @property
    def job(self) -> str:
        """The job's name (``namespaces/{namespace}/jobs/{id}``)."""
        return self.name.rsplit("/attempts/", 1)[0]
