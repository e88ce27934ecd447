"""The console's sign-in throttle: token buckets per client address and per API key id.

Every sign-in attempt takes one token from the bucket of the client's address and, for a key shaped
like an API key (``gnk_{id}_{secret}``), one from the bucket of its id, before the console asks the
API; a sign-in the API accepts gives both back, so only failed sign-ins cost. With either bucket
empty the console answers 429 with ``Retry-After`` (whole seconds until a token is back) and neither
calls the API nor makes it hash the key. Taking before the call (not counting after it) means a
flood of concurrent attempts cannot overrun the burst while the first ones are still in flight.

The address bucket stops one client from guessing; the key-id bucket stops guessing the secret of one
key from many addresses (it may lock out sign-ins with that key id for a minute at worst; the key
keeps working against the API itself). Buckets live in memory, per console process; at most
``max_buckets`` of each kind, the least recently used going first (a flood of made-up key ids evicts
other made-up ones, while a bucket not yet full again is kept as long as it is in use).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gnomon.common.auth import keys
from gnomon.common.throttle_settings import ConsoleSignInSettings

__all__ = ["Buckets", "SignInThrottle", "Ticket"]


class Buckets:
    """Token buckets by key: each holds at most ``burst`` tokens and regains ``per_minute`` per minute;
    at most ``max_buckets`` are kept (least recently used evicted; an evicted bucket comes back full).
    ``clock``: monotonic seconds."""

    def __init__(
        self,
        burst: int,
        per_minute: float,
        max_buckets: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.rate, self.max_buckets, self._clock = (
            float(burst),
            per_minute / 60.0,
            max_buckets,
            clock,
        )
        self._b: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._b.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - at) * self.rate)

    def wait_s(self, key: str) -> float:
        """Seconds until ``key``'s bucket holds a token (0: it holds one now)."""
        level = self._level(key, self._clock())
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def take(self, key: str) -> None:
        """Takes one token of ``key`` (the level may go below zero only if the caller did not check
        :meth:`wait_s` first)."""
        now = self._clock()
        level = self._level(key, now) - 1.0
        self._b[key] = (level, now)
        self._b.move_to_end(key)
        while len(self._b) > self.max_buckets:
            self._b.popitem(last=False)

    def give_back(self, key: str) -> None:
        """Returns one token to ``key`` (at most ``burst``)."""
        now = self._clock()
        if key in self._b:
            self._b[key] = (min(self.burst, self._level(key, now) + 1.0), now)

    def __len__(self) -> int:
        return len(self._b)


@dataclass(frozen=True)
class Ticket:
    """One admitted sign-in attempt: the buckets it took a token from (``key_id`` None: the key is
    not shaped like an API key, so only the address paid)."""

    address: str
    key_id: str | None


class SignInThrottle:
    """Admits sign-in attempts per client address and per API key id (see the module docstring);
    ``settings`` default to ``GNOMON_CONSOLE_SIGNIN_*``."""

    def __init__(
        self, settings: ConsoleSignInSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        s = settings or ConsoleSignInSettings()
        self.addresses = Buckets(s.address_burst, s.address_per_minute, s.max_buckets, clock)
        self.key_ids = Buckets(s.key_burst, s.key_per_minute, s.max_buckets, clock)

    def admit(self, address: str, api_key: str) -> Ticket | int:
        """A :class:`Ticket` (one token taken from each bucket) when the attempt may go to the API,
        else the whole seconds (at least 1) to send in ``Retry-After``. Cheap: no hashing, no I/O."""
        parsed = keys.parse(api_key)
        key_id = parsed.id if parsed is not None else None
        wait = self.addresses.wait_s(address)
        if key_id is not None:
            wait = max(wait, self.key_ids.wait_s(key_id))
        if wait > 0:
            return max(1, math.ceil(wait))
        self.addresses.take(address)
        if key_id is not None:
            self.key_ids.take(key_id)
        return Ticket(address, key_id)

    def succeeded(self, ticket: Ticket) -> None:
        """The API accepted the key of ``ticket``: its tokens are given back (success costs nothing)."""
        self.addresses.give_back(ticket.address)
        if ticket.key_id is not None:
            self.key_ids.give_back(ticket.key_id)
