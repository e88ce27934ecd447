"""The one after-failure transition (pure logic, no I/O).

A failed attempt, whether reported by its worker (:func:`gnomon.common.storage.results.complete`) or
found by the reaper with an expired lease (:func:`gnomon.common.storage.reaping.reap_lost_leases`,
class ``AMBIGUOUS``), is judged by :func:`after_failure`: retry (back to ``SCHEDULED`` after a delay)
or dead-letter (``DEAD``). The retry arithmetic (backoff, THROTTLED ``retry_after``, ``max_age``) is
:func:`gnomon.common.retry.retry_decision`.

A cancellation request is not part of this judgement: it is the one rule of
:data:`gnomon.common.storage.failing.FAIL_MANY`, a ``CASE`` on ``jobs.cancel_requested_at`` in the
UPDATE that writes the judgement, so it is read under the row lock and a cancel committed after the
job was read still wins: the job ends ``CANCELLED`` whatever this function decided.

The per-queue retry budget is not part of it either: it is enforced when retries are claimed
(:func:`gnomon.common.storage.claims.claim_due` defers the retries beyond the budget), so a retry
decided here may start later than ``delay_s``, never earlier. docs/concepts.md, "The life of a job" draws ``FAILED``
as the point where this decision is taken; it is taken in the result's own transaction, so a job is
never stored ``FAILED`` (see :class:`gnomon.common.domain.states.JobState`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gnomon.common.domain.failures import FailureClass, RetryReason
from gnomon.common.domain.states import JobState
from gnomon.common.retry import RetryPolicy, retry_decision


@dataclass(frozen=True)
class AfterFailure:
    """The judgement on one failed attempt.

    Attributes:
        state: the job's next state: ``SCHEDULED`` (retry) or ``DEAD`` (dead letter); a cancellation
            request overrides it when written (:data:`gnomon.common.storage.failing.FAIL_MANY`).
        delay_s: for a retry, seconds from now (database clock) until the job is due again; else None.
        reason: why (a :class:`RetryReason`).
    """

    state: JobState
    delay_s: float | None
    reason: RetryReason

    @property
    def retry(self) -> bool:
        """True when the job is tried again (``state`` is ``SCHEDULED``)."""
        return self.state is JobState.SCHEDULED


def after_failure(
    failure_class: FailureClass | str,
    *,
    error: str,
    attempt: int,
    max_attempts: int,
    idempotent: bool,
    policy: RetryPolicy,
    age_s: float | None,
    retry_after_s: float = 0.0,
    delay_override_s: float | None = None,
    rng: random.Random | None = None,
) -> AfterFailure:
    """What happens to a job whose attempt number ``attempt`` (1-based) failed.

    Args:
        failure_class: the attempt's class; any other text counts as ``TRANSIENT`` (as it always has).
        error: the error text (``"ExcType: message"``), matched against ``policy.non_retryable_errors``.
        attempt / max_attempts: attempts made so far / allowed in all (the attempt budget).
        idempotent: whether the job declared itself safe to run twice (decides ``AMBIGUOUS``).
        policy: the job's retry policy (backoff spans in seconds, ``max_age_s`` time budget).
        age_s: seconds since the job's first dispatch (database clock); None = 0.
        retry_after_s: a THROTTLED result's requested wait, seconds (0 = none).
        delay_override_s: replaces the policy's delay of a retry (tests pin the backoff with it).
        rng: randomness for the backoff's jitter.

    Returns:
        :class:`AfterFailure`: :func:`gnomon.common.retry.retry_decision` (PERMANENT and
        non-retryable error types never retry, AMBIGUOUS only when idempotent, none once
        ``attempt >= max_attempts``, a delay past ``max_age`` does not happen) gives ``SCHEDULED``
        after ``delay_s`` or ``DEAD``. A cancellation request is applied by the write, not here
        (see the module docstring).

    Raises nothing: every input has a judgement.
    """
    retry, delay, why = retry_decision(
        failure_class,
        error,
        attempt,
        policy,
        age_s,
        idempotent,
        retry_after_s=retry_after_s,
        max_attempts=max_attempts,
        rng=rng,
    )
    if not retry:
        return AfterFailure(JobState.DEAD, None, why)
    if delay_override_s is not None:
        delay = delay_override_s
    return AfterFailure(JobState.SCHEDULED, delay, why)
