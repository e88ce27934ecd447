"""Presentation of SDK models for the command line: JSON-friendly dicts (``--json``) and text tables.

The SDK returns frozen models (:mod:`gnomon.sdk.models`); everything about how they look on a
terminal or in JSON lives here. JSON conventions: instants are UTC RFC 3339 strings with ``Z``
(``"2026-03-08T07:30:00Z"``, a fraction only when non-zero) or ``None``; spans are protobuf-JSON
style seconds (``"30s"``, ``"1.5s"``) or ``None``; bytes are standard base64.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import typer

from gnomon.sdk.convert import b64, decode_json_payload, duration_text, rfc3339
from gnomon.sdk.failures import FailureClass
from gnomon.sdk.models import (
    AuditEntry,
    DeadLetter,
    DeadLetterAttempt,
    Job,
    JobAttempt,
    JobTemplate,
    PreviewFireTime,
    Queue,
    RetryPolicy,
    Schedule,
    ScheduleOccurrence,
    Shard,
)

__all__ = [
    "job_dict",
    "attempt_dict",
    "retry_policy_dict",
    "queue_dict",
    "dead_letter_dict",
    "dead_letter_attempt_dict",
    "audit_entry_dict",
    "schedule_dict",
    "template_dict",
    "occurrence_dict",
    "fire_time_dict",
    "shard_dict",
    "table",
    "fields",
]

_NOT_JSON = object()


def _span(v: timedelta | float | int | None) -> str | None:
    if v is None:
        return None
    return duration_text(v if isinstance(v, timedelta) else timedelta(seconds=float(v)))


def retry_policy_dict(p: RetryPolicy) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.RetryPolicy` as a dict (spans ``"1.5s"``; unset -> ``None``)."""
    return {
        "initial_backoff": _span(p.initial_backoff),
        "max_backoff": _span(p.max_backoff),
        "multiplier": p.multiplier,
        "jitter": p.jitter,
        "max_age": _span(p.max_age),
        "non_retryable_errors": list(p.non_retryable_errors),
    }


def job_dict(job: Job) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Job` as a dict of every field, plus ``id``; ``payload`` in base64 and
    ``payload_json`` (the decoded value) only when the payload is UTF-8 JSON."""
    r = rfc3339
    out: dict[str, Any] = {
        "name": job.name,
        "id": job.id,
        "queue": job.queue,
        "state": job.state,
        "version": job.version,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "schedule_time": r(job.schedule_time),
        "deadline": r(job.deadline),
        "create_time": r(job.create_time),
        "dispatch_time": r(job.dispatch_time),
        "start_time": r(job.start_time),
        "finish_time": r(job.finish_time),
        "idempotency_key": job.idempotency_key,
        "last_error": job.last_error,
        "region": job.region,
        "request_id": job.request_id,
        "lease_duration": duration_text(job.lease_duration),
        "idempotent": job.idempotent,
        "failure_class": failure_class_text(job.failure_class),
        "retry_policy": retry_policy_dict(job.retry_policy) if job.retry_policy else None,
        "payload": b64(job.payload),
    }
    if job.payload:
        value = decode_json_payload(job.payload, default=_NOT_JSON)
        if value is not _NOT_JSON:
            out["payload_json"] = value
    return out


def failure_class_text(fc: FailureClass | None) -> str:
    """A failure class as the CLI prints it: its name (``"PERMANENT"``), "" for none."""
    return fc.name if fc is not None else ""


def attempt_dict(a: JobAttempt) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.JobAttempt` as a dict of every field."""
    r = rfc3339
    return {
        "name": a.name,
        "attempt": a.attempt,
        "state": a.state,
        "worker_id": a.worker_id,
        "dispatcher_id": a.dispatcher_id,
        "fencing_token": a.fencing_token,
        "version": a.version,
        "failure_class": failure_class_text(a.failure_class),
        "error": a.error,
        "claim_time": r(a.claim_time),
        "accept_time": r(a.accept_time),
        "finish_time": r(a.finish_time),
        "lease_expire_time": r(a.lease_expire_time),
        "cancel_requested": a.cancel_requested,
    }


def queue_dict(q: Queue) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Queue` as a dict (``rate_limit`` as ``{rate, burst, available}``)."""
    r, d = rfc3339, duration_text
    b = q.retry_budget
    return {
        "name": q.name,
        "region": q.region,
        "breaker_state": q.breaker_state,
        "opened_time": r(q.opened_time),
        "breaker_update_time": r(q.breaker_update_time),
        "failure_ratio": q.failure_ratio,
        "window_results": q.window_results,
        "retry_budget": {
            "used": b.used,
            "allowed": b.allowed,
            "first_attempts": b.first_attempts,
            "window": d(b.window),
        },
        "due_jobs": q.due_jobs,
        "due_jobs_truncated": q.due_jobs_truncated,
        "oldest_due_age": d(q.oldest_due_age),
        "rate_limit": None if q.rate_limit is None else q.rate_limit._asdict(),
    }


def dead_letter_attempt_dict(a: DeadLetterAttempt) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.DeadLetterAttempt` as a dict."""
    r = rfc3339
    return {
        "attempt": a.attempt,
        "state": a.state,
        "failure_class": failure_class_text(a.failure_class),
        "error": a.error,
        "worker_id": a.worker_id,
        "fencing_token": a.fencing_token,
        "claim_time": r(a.claim_time),
        "start_time": r(a.start_time),
        "finish_time": r(a.finish_time),
    }


def dead_letter_dict(d: DeadLetter) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.DeadLetter`: the job's fields (:func:`job_dict`) plus ``attempts``,
    ``replay_of`` and ``replayed_by``."""
    return {
        **job_dict(d.job),
        "attempts": [dead_letter_attempt_dict(a) for a in d.attempts],
        "replay_of": d.replay_of,
        "replayed_by": d.replayed_by,
    }


def audit_entry_dict(e: AuditEntry) -> dict[str, Any]:
    """An :class:`~gnomon.sdk.AuditEntry` as a dict."""
    return {
        "name": e.name,
        "create_time": rfc3339(e.create_time),
        "actor": e.actor,
        "action": e.action,
        "reason": e.reason,
        "request_id": e.request_id,
        "details": e.details,
        "resource": e.resource,
        "outcome": e.outcome,
        "peer": e.peer,
        "count": e.count,
    }


def template_dict(t: JobTemplate) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.JobTemplate` as a dict: ``queue``, ``payload`` (base64),
    ``max_attempts`` (``None``: server default), ``lease_duration``, ``idempotent``."""
    return {
        "queue": t.queue,
        "payload": b64(t.payload),
        "max_attempts": t.max_attempts,
        "lease_duration": duration_text(t.lease_duration),
        "idempotent": t.idempotent,
    }


def schedule_dict(s: Schedule) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Schedule` as a dict with the proto field names (``interval`` for an
    ``every`` rule; enums as short names)."""
    r, d = rfc3339, duration_text
    return {
        "name": s.name,
        "cron": s.cron,
        "rrule": s.rrule,
        "interval": d(s.interval),
        "time_zone": s.time_zone,
        "dst_gap": s.dst_gap,
        "dst_fold": s.dst_fold,
        "misfire_policy": s.misfire_policy,
        "misfire_grace": d(s.misfire_grace),
        "catchup_window": d(s.catchup_window),
        "max_catchup": s.max_catchup,
        "overlap_policy": s.overlap_policy,
        "start_time": r(s.start_time),
        "end_time": r(s.end_time),
        "jitter": d(s.jitter),
        "job_template": template_dict(s.job_template),
        "paused": s.paused,
        "version": s.version,
        "etag": s.etag,
        "create_time": r(s.create_time),
        "update_time": r(s.update_time),
        "next_fire_time": r(s.next_fire_time),
        "planned_through_time": r(s.planned_through_time),
        "region": s.region,
        "tzdata_version": s.tzdata_version,
    }


def occurrence_dict(o: ScheduleOccurrence) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.ScheduleOccurrence` as a dict; the ``missed_*`` keys only for a
    coalesced run (``missed_count`` > 0)."""
    r = rfc3339
    d: dict[str, Any] = {
        "name": o.name,
        "nominal_time": r(o.nominal_time),
        "local_time": o.local_time,
        "decision": o.decision,
        "source": o.source,
        "note": o.note,
        "job": o.job,
        "schedule_time": r(o.schedule_time),
        "decide_time": r(o.decide_time),
    }
    if o.missed_count:
        d.update(
            missed_count=o.missed_count,
            missed_first_time=r(o.missed_first_time),
            missed_last_time=r(o.missed_last_time),
        )
    return d


def fire_time_dict(ft: PreviewFireTime) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.PreviewFireTime` as ``{fire_time, local_time, note, skipped}``."""
    return {
        "fire_time": rfc3339(ft.fire_time),
        "local_time": ft.local_time,
        "note": ft.note,
        "skipped": ft.skipped,
    }


def shard_dict(s: Shard) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Shard` as a dict (``acquire_time`` ISO 8601 with offset, or ``None``)."""
    return {
        "region": s.region,
        "shard": s.shard,
        "owner": s.owner,
        "fencing_token": s.fencing_token,
        "recorded_token": s.recorded_token,
        "owned": s.owned,
        "acquire_time": s.acquire_time.isoformat() if s.acquire_time else None,
    }


def table(rows: Sequence[Sequence[str]]) -> None:
    """Prints ``rows`` (the first one the header) as left-aligned columns two spaces apart; the last
    column is not padded (it may be long)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1])


def fields(pairs: Sequence[tuple[str, object]], width: int) -> None:
    """Prints ``key value`` lines, keys padded to ``width``; ``None`` shows as ``-``."""
    for k, v in pairs:
        typer.echo(f"{k:{width}} {v if v is not None else '-'}")
