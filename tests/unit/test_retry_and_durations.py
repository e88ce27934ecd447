"""Pure helpers: retry backoff (saturating), CLI duration/instant parsing, error catalogue."""

from __future__ import annotations

import random
import re
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from gnomon.cli.durations import parse_duration, parse_instant
from gnomon.common.errors import REASONS
from gnomon.common.retry import backoff_s


def test_backoff_without_jitter_doubles_then_caps():
    assert [backoff_s(a, initial_s=1, maximum_s=10, jitter=0) for a in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]


def test_backoff_saturates_at_huge_attempts():
    assert backoff_s(60, initial_s=1, maximum_s=300, jitter=0) == 300
    assert backoff_s(10**9, initial_s=1, maximum_s=300, jitter=0) == 300


def test_backoff_full_jitter_stays_within_cap():
    rng = random.Random(7)
    vals = [backoff_s(3, initial_s=1, maximum_s=100, jitter=1.0, rng=rng) for _ in range(200)]
    assert all(0 <= v <= 4 for v in vals) and max(vals) > 3 and min(vals) < 1


def test_backoff_rejects_attempt_zero():
    with pytest.raises(ValueError):
        backoff_s(0)


@pytest.mark.parametrize(
    "text,seconds", [("2s", 2), ("500ms", 0.5), ("1h30m", 5400), ("3", 3), ("1d", 86400), ("1m0.5s", 60.5)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "-2s", "2x", "s", "2s3", "1 h"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_parse_instant():
    dt = parse_instant("2026-11-29T09:00:00Z")
    assert dt.tzinfo is not None and dt.astimezone(UTC).hour == 9
    assert parse_instant("2026-11-29T10:00:00+01:00") == dt
    with pytest.raises(ValueError):
        parse_instant("2026-11-29T09:00:00")


def test_every_error_reason_is_unique_upper_snake_and_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    for reason, (_code, meaning) in REASONS.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]+", reason)
        assert f"`{reason}`" in doc, f"{reason} missing from docs/errors.md"
        assert meaning
    assert len(set(REASONS)) == len(REASONS)
