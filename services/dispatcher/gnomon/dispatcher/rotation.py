"""Which (namespace, queue) targets one claim round takes: at most ``k``, fair across namespaces
first and across the queues of a namespace next (docs/security.md: one tenant's herd or queues do not starve another).

A claim round is one statement over its targets (:func:`gnomon.common.storage.claims.claim_targets`),
so its cost follows the number of targets it names; :class:`TargetRotation` bounds that number.
When all targets fit, a round takes them all. Otherwise the ``k`` slots are shared evenly among the
namespaces with targets (water-filling: a namespace with fewer queues than its share leaves the rest
to the others), and each namespace's share is served in turns over its queues (in name order,
continuing after the last queue served). So a namespace with one queue is in every round whatever
another namespace's number of queues, and each of a namespace's ``n`` queues is visited at least
every ``ceil(n / share)`` rounds. With more namespaces than ``k`` they take turns, one queue each.

A *cycle* is the rounds it takes to visit every target once; :meth:`TargetRotation.pick` says when a
round ends one, so the claim loop knows when it may sleep until the next due job.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

Target = tuple[str, str]


def shares(counts: dict[str, int], k: int) -> dict[str, int]:
    """Slots per namespace for one round: ``k`` (>= 1) split evenly over ``counts`` (namespace ->
    number of its targets, each >= 1), none given more than its count; when there are more
    namespaces than ``k`` the caller picks which ones take part. Sums to ``min(k, sum(counts))``."""
    out: dict[str, int] = {}
    left = k
    order = sorted(counts, key=lambda ns: (counts[ns], ns))
    for i, ns in enumerate(order):
        share = min(counts[ns], max(1, left // (len(order) - i))) if left > 0 else 0
        out[ns] = share
        left -= share
    return out


def _after(queues: list[str], cursor: str | None, m: int) -> list[str]:
    """The ``m`` queues following ``cursor`` in name order, wrapping around (all if fewer)."""
    if m >= len(queues):
        return sorted(queues)
    if cursor is None:
        return heapq.nsmallest(m, queues)
    head = heapq.nsmallest(m, (q for q in queues if q > cursor))
    if len(head) < m:
        head += heapq.nsmallest(m - len(head), (q for q in queues if q <= cursor))
    return head


class TargetRotation:
    """The turns of the claim rounds of one claim loop (module docstring). Not thread-safe."""

    def __init__(self) -> None:
        self._queue_cursor: dict[str, str] = {}  # namespace -> last queue served
        self._ns_cursor: str | None = None  # last namespace served when they take turns
        self._seen: dict[str, int] = {}  # namespace -> queues served in the current cycle

    def pick(self, targets: Iterable[Target], k: int) -> tuple[list[Target], bool]:
        """The targets of the next round (at most ``k`` >= 1 of ``targets``) and whether this round
        ends a cycle (every target visited since the cycle began; always True when all fit)."""
        by_ns: dict[str, list[str]] = {}
        n = 0
        for ns, q in targets:
            by_ns.setdefault(ns, []).append(q)
            n += 1
        if n <= k:
            self._seen.clear()
            return [(ns, q) for ns, qs in by_ns.items() for q in qs], True
        namespaces = sorted(by_ns)
        if len(namespaces) > k:  # namespaces take turns, one queue each
            start = 0
            if self._ns_cursor is not None:
                start = next((i for i, ns in enumerate(namespaces) if ns > self._ns_cursor), 0)
            turn = [namespaces[(start + i) % len(namespaces)] for i in range(k)]
            self._ns_cursor = turn[-1]
            share = dict.fromkeys(turn, 1)
        else:
            share = shares({ns: len(qs) for ns, qs in by_ns.items()}, k)
        out: list[Target] = []
        for ns, m in share.items():
            if m <= 0:
                continue
            got = _after(by_ns[ns], self._queue_cursor.get(ns), m)
            self._queue_cursor[ns] = got[-1]
            self._seen[ns] = self._seen.get(ns, 0) + len(got)
            out += [(ns, q) for q in got]
        for ns in [ns for ns in self._queue_cursor if ns not in by_ns]:
            del self._queue_cursor[ns]
        done = all(self._seen.get(ns, 0) >= len(qs) for ns, qs in by_ns.items())
        if done:
            self._seen.clear()
        return out, done
