"""SQL predicates written so PostgreSQL can match them against partial indexes."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import String, literal_column
from sqlalchemy.sql.elements import ColumnElement


def state_is(column: ColumnElement[str], state: str) -> ColumnElement[bool]:
    """``column = 'STATE'`` with the state written inline instead of as a bind parameter.

    Partial indexes (migrations 0014 and 0020: ``ix_jobs_due``, ``ix_jobs_deadline``,
    ``ix_jobs_pending_dead``, ``ix_jobs_schedule``) carry a state predicate. PostgreSQL uses a partial index only when
    it can prove the query's WHERE implies the predicate, which it cannot from a parameter in a
    generic (prepared) plan; a constant it can. ``state`` must be one of the state names (upper-case
    letters), never client input. Raises ``ValueError`` otherwise."""
    if not str(state).isalpha() or not str(state).isupper():
        raise ValueError(f"not a state name: {state!r}")
    return column == literal_column(f"'{state}'", String)


def state_in(column: ColumnElement[str], states: Iterable[str]) -> ColumnElement[bool]:
    """``column IN ('A', 'B', ...)`` with the states written inline (see :func:`state_is`: a generic
    plan reaches a partial index on a state list only from constants). Raises ``ValueError`` for a
    name that is not a state name, or for an empty list."""
    names = [str(s) for s in states]
    if not names:
        raise ValueError("no states")
    for name in names:
        if not name.isalpha() or not name.isupper():
            raise ValueError(f"not a state name: {name!r}")
    return column.in_([literal_column(f"'{n}'", String) for n in names])
