"""The retry decision (pure), the retry budget arithmetic, RetryPolicy validation and its SDK forms."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gnomon._proto.gnomon.v1 import job_service_pb2, queue_service_pb2
from gnomon.api.validation import validate_create, validate_retry_policy
from gnomon.cli.render import queue_dict
from gnomon.common.errors import InvalidArgument, Validator
from gnomon.common.retry import (
    DEAD_EXHAUSTED,
    DEAD_MAX_AGE,
    DEAD_NON_RETRYABLE,
    DEAD_NOT_IDEMPOTENT,
    DEAD_PERMANENT,
    DEFAULT_POLICY,
    MAX_RETRY_AFTER_S,
    RETRY_AFTER,
    RETRY_BACKOFF,
    RetryPolicy,
    budget_allowed,
    budget_spacing_s,
    is_non_retryable,
    retry_decision,
)
from gnomon.sdk import FailureClass, TransientError, classify_exception
from gnomon.sdk import RetryPolicy as SdkPolicy
from gnomon.sdk.convert import queue_from_proto, retry_policy_from_proto, retry_policy_to_proto
from gnomon.sdk.jobs import create_job_request


def decide(
    fc="TRANSIENT", error="RuntimeError: boom", attempt=1, policy=DEFAULT_POLICY, age=0.0, idem=False, **kw
):
    return retry_decision(fc, error, attempt, policy, age, idem, **kw)


def test_schedule_without_jitter_is_exact_and_capped():
    p = RetryPolicy(initial_s=1, max_s=10, multiplier=2, jitter=0)
    assert [decide(attempt=a, policy=p)[1] for a in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert all(decide(attempt=a, policy=p)[2] == RETRY_BACKOFF for a in range(1, 7))


@pytest.mark.parametrize("jitter", [0.25, 0.5, 1.0])
def test_schedule_with_jitter_stays_within_bounds(jitter):
    p = RetryPolicy(initial_s=0.5, max_s=30, multiplier=3, jitter=jitter)
    rng = random.Random(42)
    for attempt in range(1, 8):
        cap = min(30.0, 0.5 * 3 ** (attempt - 1))
        lo, hi = p.delay_bounds(attempt)
        assert (lo, hi) == pytest.approx((cap * (1 - jitter), cap))
        delays = [decide(attempt=attempt, policy=p, rng=rng)[1] for _ in range(300)]
        assert all(lo <= d <= hi for d in delays)
        assert max(delays) - min(delays) > 0.5 * (hi - lo)  # actually spread over the range


def test_attempt_60_and_beyond_saturate_at_max_backoff():
    p = RetryPolicy(initial_s=1, max_s=300, multiplier=10, jitter=0)
    for attempt in (60, 1025, 10**9):
        assert decide(attempt=attempt, policy=p) == (True, 300.0, RETRY_BACKOFF)
    full = RetryPolicy(initial_s=1, max_s=300, multiplier=10, jitter=1)
    assert 0 <= decide(attempt=60, policy=full)[1] <= 300


def test_max_age_cuts_a_retry_that_would_start_too_late():
    p = RetryPolicy(initial_s=2, max_s=2, jitter=0, max_age_s=10)
    assert decide(policy=p, age=7.9) == (True, 2.0, RETRY_BACKOFF)  # starts at 9.9 s
    assert decide(policy=p, age=8.5) == (False, None, DEAD_MAX_AGE)  # would start at 10.5 s
    assert decide(policy=p, age=30) == (False, None, DEAD_MAX_AGE)
    assert decide(policy=p, age=None) == (True, 2.0, RETRY_BACKOFF)  # never dispatched: age 0
    # a THROTTLED retry_after past max_age is cut as well
    assert decide("THROTTLED", policy=p, age=5, retry_after_s=6) == (False, None, DEAD_MAX_AGE)


def test_non_retryable_error_types_are_permanent_whatever_the_class():
    p = RetryPolicy(non_retryable_errors=("ValueError", "billing.CardDeclined"))
    assert decide(error="ValueError: bad input", policy=p) == (False, None, DEAD_NON_RETRYABLE)
    assert decide(error="ValueError", policy=p) == (False, None, DEAD_NON_RETRYABLE)
    assert decide("THROTTLED", error="billing.CardDeclined: no", policy=p, retry_after_s=1)[0] is False
    assert decide(error="ValueErrorish: x", policy=p)[0] is True  # a different type
    assert decide(error="RuntimeError: ValueError: nested", policy=p)[0] is True
    assert decide(error="", policy=p)[0] is True
    assert is_non_retryable("KeyError: 'x'", ["KeyError"]) and not is_non_retryable("KeyErr", ["KeyError"])


def test_throttled_honours_retry_after_exactly_and_saturates():
    assert decide("THROTTLED", retry_after_s=2.0) == (True, 2.0, RETRY_AFTER)
    assert decide("THROTTLED", retry_after_s=1e15) == (True, MAX_RETRY_AFTER_S, RETRY_AFTER)
    ok, delay, why = decide("THROTTLED", retry_after_s=0.0, policy=RetryPolicy(initial_s=3, jitter=0))
    assert (ok, delay, why) == (True, 3.0, RETRY_BACKOFF)  # no hint: the backoff


def test_classes_idempotency_and_attempts():
    assert decide("PERMANENT") == (False, None, DEAD_PERMANENT)
    assert decide("AMBIGUOUS", idem=False) == (False, None, DEAD_NOT_IDEMPOTENT)
    assert decide("AMBIGUOUS", idem=True)[0] is True
    assert decide(attempt=3, max_attempts=3) == (False, None, DEAD_EXHAUSTED)
    assert decide(attempt=2, max_attempts=3)[0] is True
    assert decide("", attempt=1)[0] is True  # unknown class: TRANSIENT


def test_budget_arithmetic():
    assert budget_allowed(1000, ratio=0.2, window_s=60, min_per_s=1) == 200
    assert budget_allowed(10, ratio=0.2, window_s=60, min_per_s=1) == 60  # the floor
    assert budget_allowed(10, ratio=0.2, window_s=60, min_per_s=0) == 2
    assert budget_allowed(0, ratio=0.2, window_s=60, min_per_s=0) == 0
    assert budget_spacing_s(60, 60) == 1.0 and budget_spacing_s(0, 60) == 60


def violations(**fields):
    req = job_service_pb2.CreateJobRequest(queue="q")
    for k, v in fields.items():
        if k in ("initial_backoff", "max_backoff", "max_age"):
            getattr(req.retry_policy, k).FromTimedelta(v)
        elif k == "non_retryable_errors":
            req.retry_policy.non_retryable_errors.extend(v)
        else:
            setattr(req.retry_policy, k, v)
    try:
        validate_create(req, region="local", shards=4)
    except InvalidArgument as e:
        return {x.field for x in e.violations}
    return set()


def test_retry_policy_validation_names_each_bad_field():
    assert violations(multiplier=0.5) == {"retry_policy.multiplier"}
    assert violations(multiplier=10.5) == {"retry_policy.multiplier"}
    assert violations(multiplier=float("nan")) == {"retry_policy.multiplier"}
    assert violations(jitter=-0.1) == {"retry_policy.jitter"}
    assert violations(jitter=1.01) == {"retry_policy.jitter"}
    assert violations(initial_backoff=timedelta(seconds=20), max_backoff=timedelta(seconds=10)) == {
        "retry_policy.initial_backoff"
    }
    assert violations(initial_backoff=timedelta(seconds=400)) == {
        "retry_policy.initial_backoff"
    }  # default cap 300 s
    assert violations(max_backoff=timedelta(days=1, seconds=1)) == {"retry_policy.max_backoff"}
    assert violations(max_backoff=timedelta(0)) == {"retry_policy.max_backoff"}
    assert violations(max_age=timedelta(days=366)) == {"retry_policy.max_age"}
    assert violations(non_retryable_errors=["x"] * 33) == {"retry_policy.non_retryable_errors"}
    assert violations(non_retryable_errors=["ok", "", "a b", "a:b", "x" * 129]) == {
        "retry_policy.non_retryable_errors[1]",
        "retry_policy.non_retryable_errors[2]",
        "retry_policy.non_retryable_errors[3]",
        "retry_policy.non_retryable_errors[4]",
    }
    assert (
        violations(
            multiplier=1,
            jitter=0,
            initial_backoff=timedelta(0),
            max_backoff=timedelta(days=1),
            max_age=timedelta(days=365),
            non_retryable_errors=["x" * 128] * 32,
        )
        == set()
    )


def test_retry_policy_defaults_and_unset_jitter_versus_zero():
    req = job_service_pb2.CreateJobRequest(queue="q")
    assert validate_create(req, region="local", shards=4).retry == DEFAULT_POLICY
    req.retry_policy.jitter = 0.0  # explicitly no jitter (optional field: set)
    req.retry_policy.non_retryable_errors.extend(["ValueError", "ValueError"])
    p = validate_create(req, region="local", shards=4).retry
    assert (p.jitter, p.multiplier, p.initial_s, p.max_s, p.max_age_s) == (0.0, 2.0, 1.0, 300.0, None)
    assert p.non_retryable_errors == ("ValueError",)
    v = Validator()
    assert validate_retry_policy(v, req.retry_policy) == p and not v.violations


def test_sdk_retry_policy_dataclass_and_dict_encode_the_same():
    a = retry_policy_to_proto(
        SdkPolicy(
            initial_backoff=0.5,
            max_backoff=timedelta(seconds=20),
            multiplier=3,
            jitter=0,
            max_age=3600,
            non_retryable_errors=["ValueError"],
        )
    )
    b = retry_policy_to_proto(
        {
            "initial_backoff": 0.5,
            "max_backoff": 20,
            "multiplier": 3,
            "jitter": 0,
            "max_age": timedelta(hours=1),
            "non_retryable_errors": ("ValueError",),
        }
    )
    assert a == b and a.HasField("jitter") and a.jitter == 0 and a.max_age.seconds == 3600
    assert not retry_policy_to_proto({}).HasField("jitter")
    with pytest.raises(ValueError):
        retry_policy_to_proto({"initial": 1})
    with pytest.raises(TypeError):
        retry_policy_to_proto(["x"])
    req = create_job_request("default", "q", retry_policy={"max_backoff": 5})
    assert req.retry_policy.max_backoff.seconds == 5
    assert not create_job_request("default", "q").HasField("retry_policy")
    assert retry_policy_from_proto(a).max_backoff == timedelta(seconds=20)


def test_transient_error_and_queue_model():
    f = classify_exception(TransientError("dependency down"))
    assert f.failure_class is FailureClass.TRANSIENT and f.error == "TransientError: dependency down"
    msg = queue_service_pb2.Queue(
        name="namespaces/default/queues/q",
        breaker_state=queue_service_pb2.BREAKER_STATE_OPEN,
        failure_ratio=0.75,
        window_results=20,
        due_jobs=7,
    )
    msg.retry_budget.used, msg.retry_budget.allowed = 3, 60
    msg.oldest_due_age.FromTimedelta(timedelta(seconds=1.5))
    q = queue_from_proto(msg)
    assert (q.breaker_state, q.queue, q.retry_budget.allowed, q.opened_time) == ("OPEN", "q", 60, None)
    assert queue_dict(q)["oldest_due_age"] == "1.5s"
