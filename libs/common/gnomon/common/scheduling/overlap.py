"""Overlap policy (pure logic): what happens to a run that comes due while earlier occurrences of the
same schedule are still active (SCHEDULED for a retry, QUEUED or RUNNING). The caller reads the
active occurrences and the buffer from the database inside the planning transaction, so the policy
holds across planner and dispatcher crashes (docs/schedules.md#overlap).

ALLOW: create. SKIP: skip while one is active. BUFFER_ONE: keep at most one waiting (BUFFERED), skip
further ones. BUFFER_ALL: keep every one waiting (at most :data:`MAX_BUFFERED`), in nominal order.
CANCEL_OTHER: cancel the active ones and create.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnomon.common.domain.policies import OverlapAction, OverlapPolicy

#: BUFFER_ALL keeps at most this many occurrences of one schedule waiting; further ones are skipped.
MAX_BUFFERED = 1000

# The actions (short names of :class:`OverlapAction` members).
CREATE, BUFFER = OverlapAction.CREATE, OverlapAction.BUFFER
SKIP, CANCEL_AND_CREATE = OverlapAction.SKIP, OverlapAction.CANCEL_AND_CREATE


@dataclass
class OverlapState:
    """What is in flight for one schedule: ``active`` occurrences (jobs not terminal) and
    ``buffered`` occurrences waiting for release."""

    active: int
    buffered: int


def decide(policy: str, state: OverlapState) -> tuple[OverlapAction, str]:
    """The action for one due run under ``policy`` given ``state`` (updated in place as if the action
    was carried out). Returns ``(action, note)``: action is CREATE, BUFFER, SKIP or CANCEL_AND_CREATE."""
    busy = state.active > 0
    if policy == OverlapPolicy.ALLOW:
        state.active += 1
        return CREATE, ""
    if policy == OverlapPolicy.SKIP:
        if busy:
            return SKIP, f"overlap policy SKIP: {state.active} earlier occurrence(s) still active"
        state.active += 1
        return CREATE, ""
    if policy in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL):
        if not busy and state.buffered == 0:
            state.active += 1
            return CREATE, ""
        cap = 1 if policy == OverlapPolicy.BUFFER_ONE else MAX_BUFFERED
        if state.buffered >= cap:
            return SKIP, f"overlap policy {policy}: the buffer is full ({cap} waiting)"
        state.buffered += 1
        return BUFFER, f"overlap policy {policy}: waits for the active occurrence to finish"
    if policy == OverlapPolicy.CANCEL_OTHER:
        if busy:
            n = state.active
            state.active = 1
            return (
                CANCEL_AND_CREATE,
                f"overlap policy CANCEL_OTHER: cancelled {n} earlier active occurrence(s)",
            )
        state.active += 1
        return CREATE, ""
    raise ValueError(f"unknown overlap policy {policy}")


def release(policy: str, state: OverlapState) -> tuple[OverlapAction, str]:
    """The action for the oldest BUFFERED occurrence (released under ``policy``, the one it was
    buffered with). Returns ``(action, note)``: CREATE, SKIP, CANCEL_AND_CREATE, or BUFFER (keep
    waiting). The buffering policies release it once nothing is active; the others decide as for
    a due run (:func:`decide`)."""
    if policy not in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL):
        return decide(policy, state)
    if state.active > 0:
        return BUFFER, ""
    state.active += 1
    return CREATE, "released after the previous occurrence finished"
