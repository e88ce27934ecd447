"""The console's sign-in throttle (:mod:`gnomon.console.throttle`) and the reserved principal ids
(:func:`gnomon.common.auth.principals.reserved_principal_id`): pure logic, a fake clock."""

from __future__ import annotations

import pytest

from gnomon.common.auth import keys
from gnomon.common.auth.principals import reserved_principal_id
from gnomon.common.throttle_settings import ConsoleSignInSettings
from gnomon.console.throttle import Buckets, SignInThrottle, Ticket


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def settings(**kw) -> ConsoleSignInSettings:
    base = {"address_burst": 3, "address_per_minute": 6.0, "key_burst": 2, "key_per_minute": 3.0}
    return ConsoleSignInSettings(**{**base, **kw})


def test_failed_sign_ins_from_one_address_are_refused_past_the_burst_until_a_token_is_back():
    clock = Clock()
    t = SignInThrottle(settings(), clock)
    for _ in range(3):
        assert isinstance(t.admit("10.0.0.1", "not-a-key"), Ticket)
    assert t.admit("10.0.0.1", "not-a-key") == 10  # 6 per minute: one token every 10 s
    assert isinstance(t.admit("10.0.0.2", "not-a-key"), Ticket)  # another address has its own bucket
    clock.now += 9.5
    assert t.admit("10.0.0.1", "not-a-key") == 1
    clock.now += 0.5
    assert isinstance(t.admit("10.0.0.1", "not-a-key"), Ticket)


def test_one_key_id_is_throttled_across_addresses_and_its_secret_is_not_needed():
    clock = Clock()
    t = SignInThrottle(settings(), clock)
    key = keys.generate()
    guesses = [f"gnk_{key.id}_guess{i}" for i in range(3)]
    assert isinstance(t.admit("10.0.0.1", guesses[0]), Ticket)
    assert isinstance(t.admit("10.0.0.2", guesses[1]), Ticket)
    assert t.admit("10.0.0.3", guesses[2]) == 20  # key bucket empty: 3 per minute
    assert isinstance(t.admit("10.0.0.3", keys.generate().token), Ticket)  # another key id: fine


def test_a_successful_sign_in_costs_nothing():
    t = SignInThrottle(settings(), Clock())
    for _ in range(50):
        ticket = t.admit("10.0.0.1", keys.generate().token)
        assert isinstance(ticket, Ticket)
        t.succeeded(ticket)


def test_concurrent_attempts_cannot_overrun_the_burst():
    t = SignInThrottle(settings(), Clock())
    tickets = [t.admit("10.0.0.1", "x") for _ in range(20)]  # none has come back from the API yet
    assert sum(isinstance(x, Ticket) for x in tickets) == 3


def test_buckets_are_bounded_and_an_evicted_one_comes_back_full():
    clock = Clock()
    b = Buckets(1, 1.0, max_buckets=100, clock=clock)
    for i in range(1000):
        b.take(f"a{i}")
    assert len(b) == 100
    assert b.wait_s("a0") == 0 and b.wait_s("a999") > 0


@pytest.mark.parametrize("pid", ["jwt:admin", "cert:ops", "a:b", ":", "service", "insecure"])
def test_ids_of_other_callers_actors_are_reserved(pid):
    assert reserved_principal_id(pid)


@pytest.mark.parametrize("pid", ["ops", "console-reader", "jwt-admin", "svc.payments@example"])
def test_ordinary_ids_are_not_reserved(pid):
    assert reserved_principal_id(pid) is None
