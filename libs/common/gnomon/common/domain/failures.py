"""Failure classes and the reasons a failed attempt is or is not retried (docs/concepts.md, "Vocabulary",
"failure class"). The judgement itself is :func:`gnomon.common.domain.transitions.after_failure`."""

from __future__ import annotations

import enum


class FailureClass(enum.StrEnum):
    """How an attempt failed (``attempts.failure_class``, ``jobs.failure_class``,
    ``gnomon.v1.FailureClass`` without the prefix)."""

    TRANSIENT = "TRANSIENT"  # retried with backoff
    THROTTLED = "THROTTLED"  # retried after the worker's retry_after (else backoff)
    PERMANENT = "PERMANENT"  # never retried: to the DLQ
    AMBIGUOUS = "AMBIGUOUS"  # the effect may have happened: retried only when the job is idempotent

    @classmethod
    def parse(cls, text: str | None) -> FailureClass:
        """The class named by ``text`` (case-insensitive); empty or ``None`` means ``TRANSIENT`` (the
        SDK's default). Raises ``ValueError`` for any other text."""
        return cls((text or cls.TRANSIENT).upper())


class RetryReason(enum.StrEnum):
    """Why a failed attempt is (``BACKOFF``, ``RETRY_AFTER``) or is not retried (the rest); logged,
    and returned by :func:`gnomon.common.retry.retry_decision` and :func:`after_failure`."""

    BACKOFF = "BACKOFF"  # after the policy's jittered exponential backoff
    RETRY_AFTER = "RETRY_AFTER"  # after the THROTTLED result's retry_after
    PERMANENT = "PERMANENT"  # failure class PERMANENT
    NON_RETRYABLE_ERROR = "NON_RETRYABLE_ERROR"  # the error's type is in the policy's non_retryable_errors
    AMBIGUOUS_NOT_IDEMPOTENT = "AMBIGUOUS_NOT_IDEMPOTENT"  # outcome unknown and the job is not idempotent
    ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"  # attempt == max_attempts
    MAX_AGE_EXCEEDED = "MAX_AGE_EXCEEDED"  # the retry would start past max_age since the first dispatch
