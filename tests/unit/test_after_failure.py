"""The one after-failure transition (gnomon.common.domain.transitions.after_failure), per failure
class: used by the result path (storage.results.complete) and the reaper (storage.reaping); and the
one cancel rule, the ``CASE`` of the batched UPDATE that writes it (storage.failing.FAIL_MANY)."""

from __future__ import annotations

import random
import re
import uuid

import pytest
from sqlalchemy.dialects import postgresql

from gnomon.common.domain.failures import FailureClass, RetryReason
from gnomon.common.domain.states import TRANSITIONS, AttemptState, JobState
from gnomon.common.domain.transitions import AfterFailure, after_failure
from gnomon.common.retry import DEFAULT_POLICY, MAX_RETRY_AFTER_S, RetryPolicy
from gnomon.common.storage.failing import FAIL_MANY, Failure, fail_params

NO_JITTER = RetryPolicy(initial_s=2.0, max_s=60.0, multiplier=2.0, jitter=0.0)


def judge(fc: str, **kw: object) -> AfterFailure:
    args: dict[str, object] = dict(
        error="RuntimeError: boom",
        attempt=1,
        max_attempts=5,
        idempotent=False,
        policy=NO_JITTER,
        age_s=0.0,
    )
    args.update(kw)
    return after_failure(fc, **args)  # type: ignore[arg-type]


def test_transient_retries_with_backoff() -> None:
    assert judge("TRANSIENT") == AfterFailure(JobState.SCHEDULED, 2.0, RetryReason.BACKOFF)
    assert judge("TRANSIENT", attempt=3) == AfterFailure(JobState.SCHEDULED, 8.0, RetryReason.BACKOFF)
    assert judge("TRANSIENT", attempt=4).retry


def test_transient_exhausts_attempts() -> None:
    assert judge("TRANSIENT", attempt=5) == AfterFailure(JobState.DEAD, None, RetryReason.ATTEMPTS_EXHAUSTED)
    assert judge("TRANSIENT", attempt=1, max_attempts=1).state is JobState.DEAD


def test_throttled_honours_retry_after() -> None:
    assert judge("THROTTLED", retry_after_s=7.5) == AfterFailure(
        JobState.SCHEDULED, 7.5, RetryReason.RETRY_AFTER
    )
    # no retry_after: the policy's backoff
    assert judge("THROTTLED") == AfterFailure(JobState.SCHEDULED, 2.0, RetryReason.BACKOFF)
    # a huge retry_after saturates
    assert judge("THROTTLED", retry_after_s=1e12).delay_s == MAX_RETRY_AFTER_S
    # still bounded by the attempts
    assert judge("THROTTLED", attempt=5, retry_after_s=1).reason is RetryReason.ATTEMPTS_EXHAUSTED


def test_permanent_never_retries() -> None:
    for attempt in (1, 4):
        for idem in (False, True):
            got = judge("PERMANENT", attempt=attempt, idempotent=idem)
            assert got == AfterFailure(JobState.DEAD, None, RetryReason.PERMANENT)


@pytest.mark.parametrize("idempotent", [False, True])
def test_ambiguous_retries_only_idempotent(idempotent: bool) -> None:
    got = judge("AMBIGUOUS", idempotent=idempotent)
    if idempotent:
        assert got == AfterFailure(JobState.SCHEDULED, 2.0, RetryReason.BACKOFF)
    else:
        assert got == AfterFailure(JobState.DEAD, None, RetryReason.AMBIGUOUS_NOT_IDEMPOTENT)


def test_non_retryable_error_type_whatever_the_class() -> None:
    p = RetryPolicy(jitter=0.0, non_retryable_errors=("ValueError",))
    for fc in FailureClass:
        got = judge(fc, error="ValueError: bad", policy=p, idempotent=True)
        expect = RetryReason.PERMANENT if fc is FailureClass.PERMANENT else RetryReason.NON_RETRYABLE_ERROR
        assert got == AfterFailure(JobState.DEAD, None, expect)
    assert judge("TRANSIENT", error="ValueErrorX: bad", policy=p).retry


def test_max_age_is_a_time_budget() -> None:
    p = RetryPolicy(initial_s=10.0, jitter=0.0, max_age_s=30.0)
    assert judge("TRANSIENT", policy=p, age_s=15.0).retry  # 15 + 10 <= 30
    assert judge("TRANSIENT", policy=p, age_s=25.0) == AfterFailure(
        JobState.DEAD, None, RetryReason.MAX_AGE_EXCEEDED
    )
    assert judge("TRANSIENT", policy=p, age_s=None).retry


_CANCEL_CASE = r"CASE WHEN \(jobs\.cancel_requested_at IS NOT NULL\) THEN {then} "


def _written(outcome: AfterFailure, failure_class: str) -> tuple[str, dict[str, object]]:
    compiled = FAIL_MANY.compile(dialect=postgresql.psycopg.dialect())
    failure = Failure(uuid.UUID(int=1), 1, 7, 2, AttemptState.FAILED, failure_class, "stopped", outcome)
    return str(compiled), {**compiled.params, **fail_params([failure])}


@pytest.mark.parametrize("fc", list(FailureClass))
@pytest.mark.parametrize(("attempt", "idempotent"), [(1, True), (1, False), (5, True)])
def test_cancel_request_wins_over_every_outcome_in_the_write(
    fc: FailureClass, attempt: int, idempotent: bool
) -> None:
    # the judgement itself ignores cancellation (retry or DEAD); the batched UPDATE writing it turns
    # either into CANCELLED when the row, as the UPDATE finds it under its lock, has a cancel request
    outcome = judge(fc, attempt=attempt, idempotent=idempotent)
    assert outcome.state in (JobState.SCHEDULED, JobState.DEAD)
    sql, params = _written(outcome, fc)
    state = re.search(
        "state=" + _CANCEL_CASE.format(then=r"%\((\w+)\)s::VARCHAR") + r"ELSE v\.job_state END", sql
    )
    assert state is not None, sql
    assert params[state[1]] == JobState.CANCELLED
    assert (params["v_job_state"], params["v_retry"]) == ([outcome.state.value], [outcome.retry])
    assert params["v_delay_s"] == [outcome.delay_s]  # None for DEAD: no retry is scheduled
    # a cancelled job finishes now, a retried one is not finished, a dead one finishes now
    finishes = (
        "finished_at="
        + _CANCEL_CASE.format(then=r"now\(\)")
        + r"WHEN v\.retry THEN jobs\.finished_at ELSE now\(\) END"
    )
    assert re.search(finishes, sql), sql
    # a cancelled job keeps its scheduled_at (no retry is scheduled)
    assert re.search("scheduled_at=" + _CANCEL_CASE.format(then=r"jobs\.scheduled_at"), sql), sql
    assert "WHERE jobs.id = moved.job_id" in sql and "jobs.state = " in sql  # only a job still RUNNING


def test_delay_override_applies_to_retries_only() -> None:
    assert judge("TRANSIENT", delay_override_s=0.05).delay_s == 0.05
    assert judge("PERMANENT", delay_override_s=0.05).delay_s is None


def test_unknown_class_counts_as_transient() -> None:
    assert judge("", attempt=1) == judge("TRANSIENT", attempt=1)
    assert judge("whatever", attempt=1) == judge("TRANSIENT", attempt=1)


def test_jitter_stays_within_policy_bounds() -> None:
    rng = random.Random(7)
    for attempt in range(1, 10):
        got = after_failure(
            "TRANSIENT",
            error="",
            attempt=attempt,
            max_attempts=100,
            idempotent=False,
            policy=DEFAULT_POLICY,
            age_s=0.0,
            rng=rng,
        )
        lo, hi = DEFAULT_POLICY.delay_bounds(attempt)
        assert got.delay_s is not None and lo <= got.delay_s <= hi


def test_every_outcome_is_a_legal_transition_from_running() -> None:
    assert JobState.CANCELLED in TRANSITIONS[JobState.RUNNING]  # what a cancel request makes of any
    for fc in FailureClass:
        for attempt in (1, 5):
            got = judge(fc, attempt=attempt)
            assert got.state in TRANSITIONS[JobState.RUNNING]
            assert (got.delay_s is not None) == got.retry


def test_enum_values_equal_the_stored_text() -> None:
    assert [str(s) for s in JobState] == [
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "DEAD",
        "CANCELLED",
        "EXPIRED",
        "SKIPPED",
    ]
    assert FailureClass.parse("throttled") is FailureClass.THROTTLED
    assert FailureClass.parse(None) is FailureClass.TRANSIENT
