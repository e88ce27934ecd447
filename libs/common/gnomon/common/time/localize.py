"""Turn ascending naive local wall-time candidates into UTC occurrences under the DST policies.

Rules (docs/time.md):

* pinned rule, wall time in a gap: ``SHIFT_FORWARD`` fires at the transition instant,
  ``SKIP`` reports a skip marker; in a fold: ``FIRST``/``SECOND``/``BOTH`` passes.
* elapsed-time rule (Vixie cron): a fold fires both passes, a gap gives a skip marker.

Candidates come in wall-clock order, but second passes and gap markers map to UTC instants
that can come after later candidates, so events wait in a small heap until no later candidate
can produce an earlier (or equal) instant. Equal instants merge into one occurrence.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, tzinfo

from .model import DstFold, DstGap, Occurrence
from .zones import FOLD, UTC, classify, fmt_wall, gap_transition

FIRST_PASS = "fold: first pass"
SECOND_PASS = "fold: second pass"


#: A heap entry: (UTC instant, sequence, local wall time or None, fold, note, skipped).
_Event = tuple[datetime, int, datetime | None, int, str, bool]


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def localize(  # noqa: C901 (split by the lead)
    candidates: Iterable[tuple[datetime, str]],
    zone: tzinfo,
    *,
    elapsed: bool,
    dst_gap: DstGap,
    dst_fold: DstFold,
    after: datetime,
    end: datetime | None,
) -> Iterator[Occurrence]:
    """Occurrences for ``candidates`` (ascending naive wall times with an extra note each),
    strictly after ``after`` and not after ``end`` (both naive UTC), ascending ``fire_time``.

    Fired occurrences strictly increase; a skip marker at the instant of a fired one is dropped.
    """
    heap: list[_Event] = []
    seq = 0
    last = None
    push = heapq.heappush
    pop = heapq.heappop
    for wall, extra in candidates:
        kind, off0, off1 = classify(zone, wall)
        if kind == 0:
            u = wall - off0
            seq += 1
            push(heap, (u, seq, wall, 0, extra, False))
            frontier, inclusive = u, True
        elif kind == FOLD:
            u0, u1 = wall - off0, wall - off1
            if elapsed or dst_fold is DstFold.BOTH or dst_fold is DstFold.FIRST:
                seq += 1
                push(heap, (u0, seq, wall, 0, _join(extra, FIRST_PASS), False))
            if elapsed or dst_fold is DstFold.BOTH or dst_fold is DstFold.SECOND:
                seq += 1
                push(heap, (u1, seq, wall, 1, _join(extra, SECOND_PASS), False))
            frontier, inclusive = u0, True
        else:  # GAP
            t = gap_transition(zone, wall, off0, off1)
            seq += 1
            if elapsed:
                push(
                    heap,
                    (
                        wall - off0,
                        seq,
                        wall,
                        0,
                        _join(extra, f"DST gap: {fmt_wall(wall)} does not exist (elapsed-time rule)"),
                        True,
                    ),
                )
            elif dst_gap is DstGap.SKIP:
                push(
                    heap,
                    (
                        wall - off0,
                        seq,
                        wall,
                        0,
                        _join(extra, f"DST gap: {fmt_wall(wall)} does not exist, skipped"),
                        True,
                    ),
                )
            else:
                push(heap, (t, seq, None, 0, _join(extra, f"DST gap: shifted from {fmt_wall(wall)}"), False))
            frontier, inclusive = t, False
        while heap and (heap[0][0] < frontier or (inclusive and heap[0][0] == frontier)):
            occ = _emit(heap, pop, zone)
            u = occ.fire_time
            if end is not None and u.replace(tzinfo=None) > end:
                return
            if last is not None and u <= last:
                continue
            last = u
            if u.replace(tzinfo=None) > after:
                yield occ
    while heap:
        occ = _emit(heap, pop, zone)
        u = occ.fire_time
        if end is not None and u.replace(tzinfo=None) > end:
            return
        if last is not None and u <= last:
            continue
        last = u
        if u.replace(tzinfo=None) > after:
            yield occ


def _emit(heap: list[_Event], pop: Callable[[list[_Event]], _Event], zone: tzinfo) -> Occurrence:
    """Pop every event at the smallest instant and merge them into one occurrence."""
    u, _, wall, fold, note, skipped = pop(heap)
    if not heap or heap[0][0] != u:  # the common case: a single event
        return _make(u, wall, fold, note, skipped, zone)
    group = [(wall, fold, note, skipped)]
    while heap and heap[0][0] == u:
        _, _, w, f, n, s = pop(heap)
        group.append((w, f, n, s))
    fired = [g for g in group if not g[3]]
    chosen = fired or group
    notes: list[str] = []
    for g in chosen:
        for part in g[2].split("; "):
            if part and part not in notes:
                notes.append(part)
    # prefer a real wall time (not a shifted one) for local_time
    base = next((g for g in chosen if g[0] is not None), chosen[0])
    return _make(u, base[0], base[1], "; ".join(notes), not fired, zone)


def _make(
    u: datetime, wall: datetime | None, fold: int, note: str, skipped: bool, zone: tzinfo
) -> Occurrence:
    fire = u.replace(tzinfo=UTC)
    if wall is None:
        local = fire.astimezone(zone)
    else:
        local = wall.replace(tzinfo=zone, fold=fold)
    return Occurrence(fire, local, note, skipped)
