"""Batches of rows as bound arrays: the shape every batched statement of the storage layer uses."""

from __future__ import annotations

from typing import Any

from sqlalchemy import TableValuedAlias, bindparam, column, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeEngine


def unnest_rows(name: str, **cols: type[TypeEngine[Any]] | TypeEngine[Any]) -> TableValuedAlias:
    """``unnest(:name_a, :name_b, ...) AS name(a, b, ...)``: a batch of rows passed as one array
    parameter per column (``cols``: column name -> SQL type; parameters are named ``{name}_{col}``,
    see :func:`row_params`). One bound array per column keeps each statement's compiled form cached
    and lets the planner join on the primary key; a row-value ``IN`` list of 256 pairs planned 5x
    slower on PostgreSQL 15. PostgreSQL and CockroachDB both accept multi-argument ``unnest``."""
    args = [bindparam(f"{name}_{c}", type_=ARRAY(t)) for c, t in cols.items()]
    return func.unnest(*args).table_valued(*[column(c, t) for c, t in cols.items()]).render_derived(name=name)


def row_params(name: str, **cols: list[Any]) -> dict[str, list[Any]]:
    """Parameters for :func:`unnest_rows`: column -> list of values (all lists the same length)."""
    return {f"{name}_{c}": v for c, v in cols.items()}
