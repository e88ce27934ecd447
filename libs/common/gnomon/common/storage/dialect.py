"""The CockroachDB dialect seam (deploy/README.md): the only CockroachDB-only SQL Gnomon carries.

Everything else in :mod:`gnomon.common.storage` stays inside what PostgreSQL and CockroachDB both
accept. What lives here is applied by an operator, never by the services' own queries:

* :func:`multiregion_statements`: the multi-region DDL (database regions, survival goal, and a
  ``REGIONAL BY ROW`` locality for every table of :data:`gnomon.common.storage.schema.metadata`,
  keyed on the table's home-region column ``region``).
* :func:`claim_session_settings` / :func:`claim_role_defaults` / :func:`claim_session_options`: the
  session variables the ``FOR UPDATE SKIP LOCKED`` claim transactions need on CockroachDB.
* :func:`is_cockroach`: whether a URL, engine, connection or dialect is CockroachDB's.

``deploy/cockroachdb/multiregion.sql`` is generated from this module::

    python -m gnomon.common.storage.dialect --database gnomon --role gnomon \\
        --primary us-east1 --regions us-west1,europe-west1 > deploy/cockroachdb/multiregion.sql

and ``tests/unit/test_cockroachdb_ddl.py`` checks that the committed file equals that output. No
CockroachDB binary is available to our build machines (none is packaged for apt or PyPI), so
these statements are compile-checked (through the ``cockroachdb`` SQLAlchemy dialect where it can
express them, by structure otherwise), never executed here.

Sources (CockroachDB docs, ``stable`` = v24.1+ at the time of writing):

* Database regions: https://www.cockroachlabs.com/docs/stable/alter-database (``SET PRIMARY
  REGION``, ``ADD REGION``, ``SURVIVE ... FAILURE``),
  https://www.cockroachlabs.com/docs/stable/multiregion-overview,
  https://www.cockroachlabs.com/docs/stable/multiregion-survival-goals (region survival needs at
  least 3 database regions).
* Table localities: https://www.cockroachlabs.com/docs/stable/table-localities,
  https://www.cockroachlabs.com/docs/stable/alter-table#set-locality (``REGIONAL BY ROW AS <col>``:
  the column must be of type ``crdb_internal_region``; a ``STORED`` computed column may supply it),
  https://www.cockroachlabs.com/docs/stable/computed-columns.
* Locking: https://www.cockroachlabs.com/docs/stable/select-for-update (SKIP LOCKED; best-effort
  locks under SERIALIZABLE unless ``enable_durable_locking_for_serializable``;
  ``optimizer_use_lock_op_for_serializable``), cockroachdb/cockroach#127718 (SKIP LOCKED with LIMIT
  built above the Lock operator returned too few rows; fixed in v24.1.5 / v24.2.3).
* Session variables: https://www.cockroachlabs.com/docs/stable/set-vars (prefer the connection
  string over ``SET``, which a reconnect loses), https://www.cockroachlabs.com/docs/stable/alter-role
  (``ALTER ROLE ... SET`` defaults for every new session of a role),
  https://www.cockroachlabs.com/docs/stable/session-variables.
* Retries: https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference (handled by
  :func:`gnomon.common.storage.engine.run_transaction`, not here).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Computed, Table
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.schema import CreateColumn
from sqlalchemy.types import UserDefinedType

DOCS = "https://www.cockroachlabs.com/docs/stable/"

#: The column every table's rows are homed on. On tables with a ``region`` (home region) column it is
#: a STORED computed column ``region::crdb_internal_region``; on tables without one CockroachDB adds
#: it itself (hidden, defaulting to the gateway's region).
REGION_COLUMN = "crdb_region"
#: The home-region column of :mod:`gnomon.common.storage.schema`.
HOME_REGION_COLUMN = "region"

_REGION_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]*$")


def cockroach_dialect() -> Dialect:
    """An instance of sqlalchemy-cockroachdb's psycopg 3 dialect (the one ``cockroachdb+psycopg://`` loads)."""
    from sqlalchemy.dialects import registry

    dialect: Dialect = registry.load("cockroachdb.psycopg")()
    return dialect


def is_cockroach(target: object) -> bool:
    """Whether ``target`` is CockroachDB's dialect.

    ``target`` may be a URL (``str`` or :class:`sqlalchemy.engine.URL`, e.g.
    ``cockroachdb+psycopg://...``), a bare dialect name (``"cockroachdb"``, ``"cockroachdb+psycopg"``),
    a :class:`sqlalchemy.engine.Dialect`, or anything with a ``.dialect`` (Engine, AsyncEngine,
    Connection, AsyncConnection). It answers from the configured dialect, not from the server: a
    ``postgresql://`` URL pointing at a CockroachDB node answers False.
    """
    if isinstance(target, str):
        if "://" not in target:
            return target.split("+", 1)[0].strip().lower() == "cockroachdb"
        target = make_url(target)
    if isinstance(target, URL):
        return target.get_backend_name() == "cockroachdb"
    if isinstance(target, Dialect):
        return target.name == "cockroachdb"
    dialect = getattr(target, "dialect", None)
    if isinstance(dialect, Dialect):
        return dialect.name == "cockroachdb"
    raise TypeError(f"cannot tell the dialect of {type(target).__name__}")


class _CrdbInternalRegion(UserDefinedType[str]):
    """The ``crdb_internal_region`` enum a multi-region database gets (one value per database region)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        """The type's DDL name."""
        return "crdb_internal_region"


def _check_region(name: str) -> str:
    if not _REGION_RE.match(name):
        raise ValueError(f"not a CockroachDB region name: {name!r}")
    return name


def _check_ident(name: str, what: str) -> str:
    if not _IDENT_RE.match(name):
        raise ValueError(f"{what} must match {_IDENT_RE.pattern}: {name!r}")
    return name


def region_column_ddl(table: Table, dialect: Dialect | None = None) -> str:
    """The ``ALTER TABLE ... ADD COLUMN`` that gives ``table`` (which has a ``region`` column) its
    ``crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL`` column.

    The column definition is compiled by the cockroachdb dialect's DDL compiler (which renders
    CockroachDB's ``AS (...) STORED`` computed-column form, cf. the docs' ``ALTER TABLE ... ADD COLUMN
    region crdb_internal_region AS (CASE ... END) STORED`` example at
    https://www.cockroachlabs.com/docs/stable/alter-table#set-locality). The STRING to ENUM cast is
    immutable, so it is allowed in a computed column, and a row whose ``region`` is not a database
    region is rejected at write time (``invalid input value for enum crdb_internal_region``) instead
    of being homed somewhere else. Application SQL keeps reading and writing the portable ``region``
    STRING column; PostgreSQL never sees this column.
    """
    if HOME_REGION_COLUMN not in table.c:
        raise ValueError(f"table {table.name} has no {HOME_REGION_COLUMN!r} column")
    dialect = dialect or cockroach_dialect()
    prep = dialect.identifier_preparer
    col = Column(
        REGION_COLUMN,
        _CrdbInternalRegion(),
        Computed(f"{prep.quote(HOME_REGION_COLUMN)}::crdb_internal_region", persisted=True),
        nullable=False,
    )
    # Bind to a throwaway table so the compiler has a table context; the real table is not modified.
    Table(table.name, type(table.metadata)(), col)
    spec = str(CreateColumn(col).compile(dialect=dialect))
    return f"ALTER TABLE {prep.format_table(table)} ADD COLUMN IF NOT EXISTS {spec}"


#: Tables read on every call in every region and written rarely (identity and tenancy): GLOBAL
#: tables, whose reads are served locally in every region at the cost of slower writes
#: (https://www.cockroachlabs.com/docs/stable/global-tables).
GLOBAL_TABLES = frozenset({"namespaces", "principals", "api_keys", "grants"})


def locality_ddl(table: Table, dialect: Dialect | None = None) -> str:
    """``ALTER TABLE <table> SET LOCALITY REGIONAL BY ROW [AS crdb_region]``, or ``SET LOCALITY
    GLOBAL`` for :data:`GLOBAL_TABLES`.

    Tables with a ``region`` column are homed on it (through :func:`region_column_ddl`'s computed
    column); the others (``audit_log``, ``dlq_replays``) get CockroachDB's hidden ``crdb_region``
    column, which defaults to the region of the gateway that inserts the row
    (https://www.cockroachlabs.com/docs/stable/table-localities#regional-by-row-tables).
    """
    dialect = dialect or cockroach_dialect()
    prep = dialect.identifier_preparer
    if table.name in GLOBAL_TABLES:
        return f"ALTER TABLE {prep.format_table(table)} SET LOCALITY GLOBAL"
    head = f"ALTER TABLE {prep.format_table(table)} SET LOCALITY REGIONAL BY ROW"
    if HOME_REGION_COLUMN in table.c:
        return f"{head} AS {prep.quote(REGION_COLUMN)}"
    return head


def _regions(primary: str, regions: Sequence[str]) -> list[str]:
    out = [_check_region(primary)]
    for r in regions:
        if _check_region(r) in out:
            raise ValueError(f"region {r!r} given twice (the primary region is {primary!r})")
        out.append(r)
    return out


def multiregion_statements(
    database: str,
    primary: str,
    regions: Sequence[str],
    *,
    survive: str | None = None,
    tables: Sequence[Table] | None = None,
) -> list[str]:
    """The multi-region DDL, in the order it must run (one statement per string, no ``;``).

    1. ``ALTER DATABASE <db> SET PRIMARY REGION "<primary>"`` and ``ADD REGION IF NOT EXISTS`` for each
       of ``regions`` (https://www.cockroachlabs.com/docs/stable/alter-database; every region must be
       a cluster region, ``SHOW REGIONS FROM CLUSTER``).
    2. ``ALTER DATABASE <db> SURVIVE {ZONE|REGION} FAILURE``: ``survive`` is ``"zone"`` or
       ``"region"``; by default ``"region"`` when there are 3+ regions, else ``"zone"``. Region
       survival with fewer than 3 regions raises ``ValueError``, as CockroachDB would
       (https://www.cockroachlabs.com/docs/stable/multiregion-survival-goals). No SECONDARY REGION:
       it is not supported together with REGIONAL BY ROW tables
       (https://www.cockroachlabs.com/docs/stable/multiregion-overview#secondary-regions).
    3. For every table (default: all of ``schema.metadata``, in definition order): the computed
       ``crdb_region`` column (:func:`region_column_ddl`, tables with a ``region`` column) and the
       ``REGIONAL BY ROW`` locality (:func:`locality_ddl`).
    """
    from gnomon.common.storage.schema import metadata

    dialect = cockroach_dialect()
    prep = dialect.identifier_preparer
    db = prep.quote(_check_ident(database, "database"))
    all_regions = _regions(primary, regions)
    goal = survive or ("region" if len(all_regions) >= 3 else "zone")
    if goal not in ("zone", "region"):
        raise ValueError(f"survive must be 'zone' or 'region', not {goal!r}")
    if goal == "region" and len(all_regions) < 3:
        raise ValueError("at least 3 regions are required for surviving a region failure")
    out = [f'ALTER DATABASE {db} SET PRIMARY REGION "{primary}"']
    out += [f'ALTER DATABASE {db} ADD REGION IF NOT EXISTS "{r}"' for r in all_regions[1:]]
    out.append(f"ALTER DATABASE {db} SURVIVE {goal.upper()} FAILURE")
    for t in metadata.tables.values() if tables is None else tables:
        if HOME_REGION_COLUMN in t.c:
            out.append(region_column_ddl(t, dialect))
        out.append(locality_ddl(t, dialect))
    return out


@dataclass(frozen=True)
class SessionSetting:
    """One session variable a claim transaction needs on CockroachDB, with why and where it is documented."""

    name: str
    value: str
    doc: str
    why: str


#: The session variables for the claim / plan / reap transactions (all ``SELECT ... FOR UPDATE SKIP
#: LOCKED`` under SERIALIZABLE, CockroachDB's default isolation). SKIP LOCKED itself needs v22.2+;
#: with the Lock operator these settings select, v24.1.5+ / v24.2.3+ (cockroachdb/cockroach#127718).
CLAIM_SESSION_SETTINGS: tuple[SessionSetting, ...] = (
    SessionSetting(
        "enable_durable_locking_for_serializable",
        "true",
        DOCS + "select-for-update",
        "FOR UPDATE locks under SERIALIZABLE are best-effort by default (lost on a lease transfer or a "
        "range split/merge); durable locks are held to commit, so a claimed row stays claimed",
    ),
    SessionSetting(
        "optimizer_use_lock_op_for_serializable",
        "true",
        DOCS + "select-for-update",
        "lock with the Lock operator after filtering, on the primary index (PostgreSQL-like FOR UPDATE); "
        "with SKIP LOCKED the LIMIT is applied after skipping (fixed in v24.1.5 / v24.2.3)",
    ),
)


def claim_session_settings() -> list[str]:
    """``SET <name> = <value>`` for each of :data:`CLAIM_SESSION_SETTINGS` (one session; a reconnect
    loses them, https://www.cockroachlabs.com/docs/stable/set-vars)."""
    return [f"SET {s.name} = {s.value}" for s in CLAIM_SESSION_SETTINGS]


def claim_role_defaults(role: str) -> list[str]:
    """``ALTER ROLE <role> SET <name> = <value>``: the same settings as defaults of every new session
    of the services' role (https://www.cockroachlabs.com/docs/stable/alter-role), so no service code
    or connection string has to carry them."""
    r = cockroach_dialect().identifier_preparer.quote(_check_ident(role, "role"))
    return [f"ALTER ROLE {r} SET {s.name} = {s.value}" for s in CLAIM_SESSION_SETTINGS]


def claim_session_options(url_or_dialect: object) -> dict[str, str]:
    """The settings as ``session_options`` for :func:`gnomon.common.storage.engine.make_engine`
    (``options=-c name=value`` in the connection string) on CockroachDB; ``{}`` on PostgreSQL, which
    would refuse the unknown parameters at connect."""
    if not is_cockroach(url_or_dialect):
        return {}
    return {s.name: s.value for s in CLAIM_SESSION_SETTINGS}


def render_sql(
    database: str, primary: str, regions: Sequence[str], *, role: str, survive: str | None = None
) -> str:
    """The text of ``deploy/cockroachdb/multiregion.sql``: every statement with the docs page it follows."""
    from gnomon.common.storage.schema import metadata

    argv = f"--database {database} --role {role} --primary {primary} --regions {','.join(regions)}"
    if survive:
        argv += f" --survive {survive}"
    stmts = multiregion_statements(database, primary, regions, survive=survive)
    lines = [
        "-- Gnomon on a multi-region CockroachDB cluster (v24.1.5+ / v24.2.3+). GENERATED, do not edit:",
        f"--   python -m gnomon.common.storage.dialect {argv} > deploy/cockroachdb/multiregion.sql",
        "-- Apply after `gnomon migrate` (see deploy/README.md), outside an explicit transaction.",
        "-- Compile-checked only (tests/unit/test_cockroachdb_ddl.py): no CockroachDB binary is available to CI.",
        "",
        "-- 1. Database regions and survival goal.",
        f"-- {DOCS}alter-database  {DOCS}multiregion-overview  {DOCS}multiregion-survival-goals",
    ]
    n_db = 2 + len(regions)
    lines += [s + ";" for s in stmts[:n_db]]
    lines += [
        "",
        "-- 2. Table localities: REGIONAL BY ROW on the home region.",
        f"-- {DOCS}table-localities#regional-by-row-tables  {DOCS}alter-table#set-locality",
        f"-- {DOCS}computed-columns",
        "-- Tables with a `region` column: `crdb_region` is a STORED computed column `region::crdb_internal_region`",
        "-- (REGIONAL BY ROW AS needs a crdb_internal_region column; a row whose region is not a database region",
        "-- is rejected). Tables without one get CockroachDB's hidden crdb_region (default: the gateway's region).",
    ]
    rest = stmts[n_db:]
    for t in metadata.tables.values():
        mine = [s for s in rest if s.startswith((f"ALTER TABLE {t.name} ", f'ALTER TABLE "{t.name}" '))]
        if t.name in GLOBAL_TABLES:
            keyed = "read everywhere, written rarely: GLOBAL"
        elif HOME_REGION_COLUMN in t.c:
            keyed = "home region column `region`"
        else:
            keyed = "no region column: gateway region"
        lines.append(f"-- {t.name}: {keyed}")
        lines += [s + ";" for s in mine]
    lines += [
        "",
        "-- 3. Session defaults the FOR UPDATE SKIP LOCKED claim transactions need (role of the services).",
        f"-- {DOCS}alter-role  {DOCS}set-vars  {DOCS}session-variables",
    ]
    for s, stmt in zip(CLAIM_SESSION_SETTINGS, claim_role_defaults(role)):
        lines.append(f"-- {s.doc}: {s.why}.")
        lines.append(stmt + ";")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: prints the CockroachDB multi-region DDL (``--help`` for the flags); returns 0."""
    p = argparse.ArgumentParser(
        prog="python -m gnomon.common.storage.dialect",
        description="Print the CockroachDB multi-region DDL for Gnomon's schema.",
    )
    p.add_argument("--database", required=True)
    p.add_argument("--primary", required=True, help="primary region, e.g. us-east1")
    p.add_argument("--regions", default="", help="other regions, comma-separated")
    p.add_argument("--role", default="gnomon", help="SQL role the services connect as")
    p.add_argument("--survive", choices=("zone", "region"), default=None)
    a = p.parse_args(argv)
    regions = [r.strip() for r in a.regions.split(",") if r.strip()]
    try:
        sys.stdout.write(render_sql(a.database, a.primary, regions, role=a.role, survive=a.survive))
    except ValueError as exc:
        p.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
