"""Properties (Hypothesis) of the pure scheduling helpers: backoff, sharding, durations, validation."""

from __future__ import annotations

import uuid
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon.api.validation import QUEUE_RE, validate_create
from gnomon.cli.durations import parse_duration
from gnomon.common.domain.jobs import shard_of
from gnomon.common.domain.states import JOB_STATES, TERMINAL, TRANSITIONS
from gnomon.common.errors import InvalidArgument
from gnomon.common.retry import backoff_s


@given(
    attempt=st.integers(min_value=1, max_value=10**12),
    initial=st.floats(0.001, 100),
    maximum=st.floats(0.001, 10_000),
    mult=st.floats(0.5, 10),
    jitter=st.floats(0, 1),
)
def test_backoff_is_finite_non_negative_and_capped(attempt, initial, maximum, mult, jitter):
    d = backoff_s(attempt, initial_s=initial, maximum_s=maximum, multiplier=mult, jitter=jitter)
    assert 0 <= d <= max(maximum, 0) + 1e-9
    assert d == d  # not NaN


@given(a=st.integers(1, 200), b=st.integers(1, 200))
def test_backoff_without_jitter_never_decreases(a, b):
    lo, hi = sorted((a, b))
    assert backoff_s(lo, jitter=0) <= backoff_s(hi, jitter=0)


@given(st.uuids(), st.integers(1, 4096))
def test_shard_is_stable_and_in_range(job_id: uuid.UUID, shards: int):
    s = shard_of(job_id, shards)
    assert 0 <= s < shards and s == shard_of(uuid.UUID(str(job_id)), shards)


@given(h=st.integers(0, 100), m=st.integers(0, 59), s=st.integers(0, 59), ms=st.integers(0, 999))
def test_duration_round_trip(h, m, s, ms):
    text = f"{h}h{m}m{s}s{ms}ms"
    assert parse_duration(text) == timedelta(hours=h, minutes=m, seconds=s, milliseconds=ms)


@given(st.text(max_size=80))
def test_queue_validation_agrees_with_the_documented_rule(queue):
    req = js.CreateJobRequest(queue=queue)
    try:
        validate_create(req, region="local", shards=8)
        accepted = True
    except InvalidArgument as e:
        accepted = False
        assert [v.field for v in e.violations] == ["queue"]
    assert accepted == bool(queue and QUEUE_RE.fullmatch(queue)) and (not accepted or len(queue) <= 64)


def test_terminal_states_have_no_way_out_and_every_state_is_known():
    for src, dsts in TRANSITIONS.items():
        assert src in JOB_STATES and dsts <= set(JOB_STATES)
    assert all(t not in TRANSITIONS for t in TERMINAL)
