"""Retry decisions (pure): capped exponential backoff with jitter, the per-job retry policy and the
per-queue retry budget arithmetic.

Source: "Exponential Backoff And Jitter", AWS Architecture Blog (full jitter); the retry budget
follows the SRE book ("Handling Overload": retries at most a fixed ratio of requests). Arithmetic
saturates: the exponent is clamped, so attempt 60 (or 10**9) never overflows, and a THROTTLED
``retry_after`` is capped at :data:`MAX_RETRY_AFTER_S`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from gnomon.common.domain.failures import FailureClass, RetryReason

#: Upper bound applied to a THROTTLED ``retry_after`` (a worker may send any Duration), seconds.
MAX_RETRY_AFTER_S = 365 * 86400.0

# Reasons returned by :func:`retry_decision` (members of :class:`RetryReason`): a retry ...
RETRY_BACKOFF = RetryReason.BACKOFF  # after the policy's jittered exponential backoff
RETRY_AFTER = RetryReason.RETRY_AFTER  # after the THROTTLED result's retry_after
# ... or none, the job goes to the DLQ (DEAD):
DEAD_PERMANENT = RetryReason.PERMANENT  # failure class PERMANENT
DEAD_NON_RETRYABLE = RetryReason.NON_RETRYABLE_ERROR  # the error's type is in non_retryable_errors
DEAD_NOT_IDEMPOTENT = RetryReason.AMBIGUOUS_NOT_IDEMPOTENT  # outcome unknown, job not idempotent
DEAD_EXHAUSTED = RetryReason.ATTEMPTS_EXHAUSTED  # attempt == max_attempts
DEAD_MAX_AGE = RetryReason.MAX_AGE_EXCEEDED  # the retry would start past max_age since the first dispatch


def backoff_s(
    attempt: int,
    *,
    initial_s: float = 1.0,
    maximum_s: float = 300.0,
    multiplier: float = 2.0,
    jitter: float = 1.0,
    rng: random.Random | None = None,
) -> float:
    """Delay in seconds before retry number ``attempt`` (1 = after the first failed attempt).

    The cap is ``min(maximum_s, initial_s * multiplier ** (attempt - 1))``; with ``jitter`` j in [0, 1]
    the result is uniform in ``[cap * (1 - j), cap]``. Raises ``ValueError`` for attempt < 1.
    """
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    if multiplier <= 1.0:
        cap = min(maximum_s, initial_s)
    else:
        # clamp the exponent so the power cannot overflow a float
        exp = min(attempt - 1, 1024)
        try:
            cap = min(maximum_s, initial_s * multiplier**exp)
        except OverflowError:
            cap = maximum_s
    r = (rng or random).random()
    return cap * (1.0 - jitter * r)


@dataclass(frozen=True)
class RetryPolicy:
    """How the failed attempts of one job are retried (``gnomon.v1.RetryPolicy``); spans in seconds.

    Defaults (also the API's): 1 s initial backoff, 300 s cap, multiplier 2, full jitter (1.0), no
    ``max_age_s``, no non-retryable error types.
    """

    initial_s: float = 1.0
    max_s: float = 300.0
    multiplier: float = 2.0
    jitter: float = 1.0
    max_age_s: float | None = None
    non_retryable_errors: tuple[str, ...] = ()

    def delay_bounds(self, attempt: int) -> tuple[float, float]:
        """``(low, high)`` seconds between which the backoff after failed ``attempt`` falls."""
        hi = backoff_s(
            attempt, initial_s=self.initial_s, maximum_s=self.max_s, multiplier=self.multiplier, jitter=0
        )
        return hi * (1.0 - self.jitter), hi


DEFAULT_POLICY = RetryPolicy()


def is_non_retryable(error: str | None, names: Iterable[str]) -> bool:
    """Whether ``error`` (the SDK sends ``"ExcType: message"``, or just ``"ExcType"``) names one of the
    error types ``names``: the text is the name itself or starts with ``"<name>:"``."""
    error = error or ""
    return any(error == n or error.startswith(n + ":") for n in names)


def retry_decision(
    failure_class: str,
    error: str,
    attempt: int,
    policy: RetryPolicy,
    age_s: float | None,
    idempotent: bool,
    *,
    retry_after_s: float = 0.0,
    max_attempts: int | None = None,
    rng: random.Random | None = None,
) -> tuple[bool, float | None, RetryReason]:
    """Whether (and after how long) the job is tried again after failed attempt number ``attempt``.

    Returns ``(retry, delay_s, reason)``; ``delay_s`` is ``None`` when there is no retry, and
    ``reason`` is one of the ``RETRY_*`` / ``DEAD_*`` constants of this module. In order:

    * ``PERMANENT`` never retries; nor does an ``error`` whose type is in the policy's
      ``non_retryable_errors`` (:func:`is_non_retryable`), whatever its class;
    * ``AMBIGUOUS`` (the effect may have happened) retries only an ``idempotent`` job;
    * no retry once ``attempt >= max_attempts`` (when given);
    * ``THROTTLED`` with a positive ``retry_after_s`` waits exactly that (at most
      :data:`MAX_RETRY_AFTER_S`); every other retry waits :func:`backoff_s` with the policy's
      parameters (saturating: attempt 60 waits at most ``max_s``);
    * with ``max_age_s`` set, a retry that would start more than ``max_age_s`` after the first
      dispatch (``age_s + delay_s > max_age_s``; ``age_s`` = seconds since the first attempt was
      dispatched, ``None`` = 0) does not happen.
    """
    fc = (failure_class or FailureClass.TRANSIENT).upper()
    if fc == FailureClass.PERMANENT:
        return False, None, DEAD_PERMANENT
    if is_non_retryable(error, policy.non_retryable_errors):
        return False, None, DEAD_NON_RETRYABLE
    if fc == FailureClass.AMBIGUOUS and not idempotent:
        return False, None, DEAD_NOT_IDEMPOTENT
    if max_attempts is not None and attempt >= max_attempts:
        return False, None, DEAD_EXHAUSTED
    if fc == FailureClass.THROTTLED and retry_after_s and retry_after_s > 0 and not math.isnan(retry_after_s):
        delay, reason = min(float(retry_after_s), MAX_RETRY_AFTER_S), RetryReason.RETRY_AFTER
    else:
        delay = backoff_s(
            max(1, attempt),
            initial_s=policy.initial_s,
            maximum_s=policy.max_s,
            multiplier=policy.multiplier,
            jitter=policy.jitter,
            rng=rng,
        )
        reason = RetryReason.BACKOFF
    if policy.max_age_s is not None and max(0.0, age_s or 0.0) + delay > policy.max_age_s:
        return False, None, DEAD_MAX_AGE
    return True, delay, reason


def budget_allowed(first_attempts: int, *, ratio: float, window_s: float, min_per_s: float) -> int:
    """Retries a queue may start within one sliding window: ``ratio`` of the first attempts started
    in it, but at least ``min_per_s * window_s`` (so a quiet queue can still retry). Rounded down."""
    return int(math.floor(max(ratio * max(0, first_attempts), min_per_s * window_s)))


def budget_spacing_s(allowed: int, window_s: float) -> float:
    """Average time between two retries when the budget is spent at its rate (``window_s / allowed``);
    a retry held back by the budget is pushed back by multiples of it. ``window_s`` when nothing is
    allowed."""
    return window_s / allowed if allowed > 0 else window_s
