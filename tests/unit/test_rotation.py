"""The claim round's choice of targets (gnomon.dispatcher.rotation): bounded, fair across
namespaces first and queues next, and every target visited once per cycle."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gnomon.dispatcher.rotation import TargetRotation, shares


def targets(**queues_per_ns: int) -> list[tuple[str, str]]:
    return [(ns, f"q{j:04d}") for ns, n in queues_per_ns.items() for j in range(n)]


def test_all_targets_when_they_fit():
    r = TargetRotation()
    got, end = r.pick(targets(acme=3, evil=5), 8)
    assert sorted(got) == sorted(targets(acme=3, evil=5)) and end


def test_shares_fill_evenly_and_give_the_unused_slots_away():
    assert shares({"acme": 1, "evil": 5000}, 64) == {"acme": 1, "evil": 63}
    assert shares({"a": 10, "b": 10, "c": 10}, 9) == {"a": 3, "b": 3, "c": 3}
    assert sum(shares({"a": 2, "b": 40, "c": 7}, 20).values()) == 20


def test_a_small_namespace_is_in_every_round_of_a_large_one():
    r = TargetRotation()
    ts = targets(acme=1, evil=5000)
    rounds = math.ceil(5000 / 63)
    seen = set()
    for i in range(rounds):
        got, end = r.pick(ts, 64)
        assert len(got) == 64 and ("acme", "q0000") in got
        seen.update(got)
        assert end == (i == rounds - 1)
    assert seen == set(ts)


def test_more_namespaces_than_slots_take_turns():
    r = TargetRotation()
    ts = [(f"ns{i:03d}", "q") for i in range(10)]
    first, end1 = r.pick(ts, 4)
    second, end2 = r.pick(ts, 4)
    third, end3 = r.pick(ts, 4)
    assert len(first) == len(second) == 4 and not set(first) & set(second)
    assert set(first) | set(second) | set(third) == set(ts)
    assert (end1, end2, end3) == (False, False, True)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 60), min_size=1),
    st.integers(1, 40),
)
def test_every_target_is_visited_within_a_cycle_and_rounds_are_bounded(counts, k):
    r = TargetRotation()
    ts = targets(**counts)
    seen: set = set()
    for _ in range(len(ts) * len(counts) + 1):  # a namespace gets a turn at least every len(counts) rounds
        got, end = r.pick(ts, k)
        assert len(got) == min(k, len(ts)) and len(set(got)) == len(got)
        seen.update(got)
        if end:
            break
    assert end and seen == set(ts)
