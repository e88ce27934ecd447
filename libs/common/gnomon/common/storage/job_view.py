"""The job as clients see it: ``state``, ``version`` and ``started_at`` derived from its current
attempt.

A worker's accept writes only the attempt row (QUEUED -> RUNNING, :func:`gnomon.common.storage.leases.accept`);
the ``jobs`` row stays ``QUEUED`` at the version the claim gave it. A job is **RUNNING** while its
row is ``QUEUED`` and its current attempt (``attempts`` row ``(jobs.id, jobs.attempt)``) is
``RUNNING``. For such a job a reader sees:

* ``state`` RUNNING;
* ``version`` = ``jobs.version + 1``: the number the accept used to write (an accept was one
  version step), so ``expected_version`` keeps its meaning for clients and every later step (a
  cancel request, the result) still adds one to what they saw;
* ``started_at`` = the attempt's ``accepted_at`` (what the accept used to copy to the job row).

A row written ``RUNNING`` by a release whose accept still wrote the job (``jobs.state =
'RUNNING'``, version and ``started_at`` already stepped) reads as it is: both forms are read, and
every writer that moves a running job (result, reaper, cancel) accepts both (:data:`RUNNING_ROW`).
Any other job reads as its row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Integer, String, and_, case, literal_column
from sqlalchemy.sql.elements import ColumnElement

from gnomon.common.domain.states import AttemptState, JobState
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.schema import attempts, jobs

_ONE = literal_column("1", Integer)
_ZERO = literal_column("0", Integer)

#: The job's current attempt, joined only to QUEUED rows (at most one row each: primary key).
current = attempts.alias("current_attempt")

#: ``jobs LEFT JOIN current_attempt``: the FROM of every read that derives the state.
JOB_FROM = jobs.outerjoin(
    current,
    and_(
        current.c.job_id == jobs.c.id,
        current.c.attempt == jobs.c.attempt,
        state_is(jobs.c.state, JobState.QUEUED),
    ),
)

#: SQL: the job row is QUEUED and its current attempt RUNNING (accepted; written by this release).
RUNNING_NOW: ColumnElement[bool] = and_(
    state_is(jobs.c.state, JobState.QUEUED), state_is(current.c.state, AttemptState.RUNNING)
)

#: SQL: the state a client sees (see the module docstring).
STATE: ColumnElement[Any] = case(
    (RUNNING_NOW, literal_column(f"'{JobState.RUNNING.value}'", String)), else_=jobs.c.state
)
#: SQL: the version a client sees (``jobs.version + 1`` while derived RUNNING).
VERSION: ColumnElement[Any] = jobs.c.version + case((RUNNING_NOW, _ONE), else_=_ZERO)
#: SQL: ``started_at`` as a client sees it (the accept time of the running attempt).
STARTED_AT: ColumnElement[Any] = case((RUNNING_NOW, current.c.accepted_at), else_=jobs.c.started_at)

#: SQL on the job row being written: it is the row of a running job at its attempt, in either
#: form (``RUNNING``, or ``QUEUED`` with the attempt RUNNING; the caller has checked or holds the
#: attempt RUNNING, e.g. its own compare-and-set just moved it out of RUNNING).
RUNNING_ROW: ColumnElement[bool] = state_is(jobs.c.state, JobState.QUEUED) | state_is(
    jobs.c.state, JobState.RUNNING
)

#: SQL on the job row being written: the version steps the derived RUNNING state adds (1 for a
#: QUEUED row whose attempt is running, 0 for a row written RUNNING): a writer that ends the run
#: adds ``1 + UNSTEPPED`` so the version a client saw goes up by exactly one.
UNSTEPPED: ColumnElement[Any] = case((state_is(jobs.c.state, JobState.QUEUED), _ONE), else_=_ZERO)

_DERIVED = {"state": STATE, "version": VERSION, "started_at": STARTED_AT}


def derived_columns(cols: Iterable[Any]) -> list[Any]:
    """``cols`` (``jobs`` columns, or labelled expressions) with ``state``, ``version`` and
    ``started_at`` replaced by their derived expressions under the same names; select them
    ``FROM`` :data:`JOB_FROM`."""
    out = []
    for c in cols:
        key = getattr(c, "key", None)
        out.append(_DERIVED[key].label(key) if key in _DERIVED and getattr(c, "table", None) is jobs else c)
    return out


def stored_states(state: str) -> list[str]:
    """The ``jobs.state`` values a job whose derived state is ``state`` can have on its row:
    RUNNING is ``QUEUED`` or ``RUNNING``; any other state is itself."""
    if state == JobState.RUNNING:
        return [JobState.QUEUED.value, JobState.RUNNING.value]
    return [state]


def state_filter(state: str) -> ColumnElement[bool]:
    """SQL: the derived state is ``state`` (a client's filter value, bound as a parameter; the
    stored states first, so an index on ``jobs.state`` applies)."""
    return and_(jobs.c.state.in_(stored_states(state)), STATE == state)
