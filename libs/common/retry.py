"""Retry backoff (pure): capped exponential with full jitter.

Source: "Exponential Backoff And Jitter", AWS Architecture Blog (full jitter). Arithmetic
saturates: the exponent is clamped, so attempt 60 (or 10**9) never overflows.
"""
from __future__ import annotations

import random


def backoff_s(attempt: int, *, initial_s: float = 1.0, maximum_s: float = 300.0, multiplier: float = 2.0,
              jitter: float = 1.0, rng: random.Random | None = None) -> float:
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
            cap = min(maximum_s, initial_s * multiplier ** exp)
        except OverflowError:
            cap = maximum_s
    r = (rng or random).random()
    return cap * (1.0 - jitter * r)
