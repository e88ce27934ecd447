"""SQL predicates written so PostgreSQL can match them against partial indexes."""

from __future__ import annotations

from sqlalchemy import String, literal_column
from sqlalchemy.sql.elements import ColumnElement


def state_is(column: ColumnElement[str], state: str) -> ColumnElement[bool]:
    """``column = 'STATE'`` with the state written inline instead of as a bind parameter.

    Partial indexes (migration 0014: ``ix_jobs_due``, ``ix_jobs_deadline``,
    ``ix_attempts_running_lease``) carry a state predicate. PostgreSQL uses a partial index only when
    it can prove the query's WHERE implies the predicate, which it cannot from a parameter in a
    generic (prepared) plan; a constant it can. ``state`` must be one of the state names (upper-case
    letters), never client input. Raises ``ValueError`` otherwise."""
    if not str(state).isalpha() or not str(state).isupper():
        raise ValueError(f"not a state name: {state!r}")
    return column == literal_column(f"'{state}'", String)
