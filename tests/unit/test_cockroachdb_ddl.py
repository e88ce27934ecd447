"""The CockroachDB-only SQL in deploy/cockroachdb/, compile-checked against the cockroachdb dialect.

No CockroachDB binary is available to CI (none is packaged for apt or PyPI), so nothing below
executes: statements the cockroachdb SQLAlchemy dialect can express are compiled by it (computed
column DDL, the SKIP LOCKED claim queries); the CockroachDB-only grammar (ALTER DATABASE ...
REGION, SET LOCALITY) is checked by structure against the schema it has to cover.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.schema import CreateColumn

from gnomon.common.storage import claims, planning, rate_limits
from gnomon.common.storage import dialect as D
from gnomon.common.storage.schema import metadata

ROOT = Path(__file__).resolve().parents[2]
SQL_FILE = ROOT / "deploy" / "cockroachdb" / "multiregion.sql"
GEN_ARGS = [
    "--database",
    "gnomon",
    "--role",
    "gnomon",
    "--primary",
    "us-east1",
    "--regions",
    "us-west1,europe-west1",
]
CRDB = D.cockroach_dialect()

LOCALITY_RE = re.compile(
    r"^ALTER TABLE (?P<table>[a-z_]+) SET LOCALITY (?:REGIONAL BY ROW(?: AS (?P<col>[a-z_]+))?|(?P<global>GLOBAL))$"
)
ADD_COL_RE = re.compile(
    r"^ALTER TABLE (?P<table>[a-z_]+) ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region "
    r"AS \((?P<src>[a-z_]+)::crdb_internal_region\) STORED NOT NULL$"
)


def statements_of(sql: str) -> list[str]:
    """The statements of a script: comment lines dropped, split on ';' at line ends."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def mr() -> list[str]:
    return D.multiregion_statements("gnomon", "us-east1", ["us-west1", "europe-west1"])


# --- the committed file is the generated one ------------------------------------------------------


def test_committed_sql_equals_generated():
    out = subprocess.run(
        [sys.executable, "-m", "gnomon.common.storage.dialect", *GEN_ARGS],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert SQL_FILE.read_text() == out, (
        "deploy/cockroachdb/multiregion.sql is stale; regenerate it with: python -m gnomon.common.storage.dialect "
        + " ".join(GEN_ARGS)
        + " > deploy/cockroachdb/multiregion.sql"
    )


def test_file_holds_exactly_the_module_statements():
    assert statements_of(SQL_FILE.read_text()) == mr() + D.claim_role_defaults("gnomon")


def test_every_statement_block_cites_a_cockroach_docs_page():
    text_ = SQL_FILE.read_text()
    sections = [b for b in text_.split("\n\n") if any(not ln.startswith("--") for ln in b.splitlines())]
    assert len(sections) == 3  # database regions, table localities, claim session defaults
    for block in sections:
        assert "-- https://www.cockroachlabs.com/docs/stable/" in block, block
    lines = text_.splitlines()
    for s in D.CLAIM_SESSION_SETTINGS:
        assert s.doc.startswith("https://www.cockroachlabs.com/docs/stable/")
        idx = lines.index(f"ALTER ROLE gnomon SET {s.name} = {s.value};")
        assert lines[idx - 1].startswith(f"-- {s.doc}: ")


# --- database regions -----------------------------------------------------------------------------


def test_database_region_statements():
    s = mr()
    assert s[0] == 'ALTER DATABASE gnomon SET PRIMARY REGION "us-east1"'
    assert s[1:3] == [
        'ALTER DATABASE gnomon ADD REGION IF NOT EXISTS "us-west1"',
        'ALTER DATABASE gnomon ADD REGION IF NOT EXISTS "europe-west1"',
    ]
    assert s[3] == "ALTER DATABASE gnomon SURVIVE REGION FAILURE"
    assert not any("SECONDARY REGION" in x for x in s)  # unsupported with REGIONAL BY ROW tables


def test_survival_goal_rules():
    assert (
        D.multiregion_statements("gnomon", "us-east1", ["us-west1"])[2]
        == "ALTER DATABASE gnomon SURVIVE ZONE FAILURE"
    )
    assert "ALTER DATABASE gnomon SURVIVE ZONE FAILURE" in D.multiregion_statements(
        "gnomon", "us-east1", ["us-west1", "europe-west1"], survive="zone"
    )
    with pytest.raises(ValueError, match="at least 3 regions"):
        D.multiregion_statements("gnomon", "us-east1", ["us-west1"], survive="region")


@pytest.mark.parametrize(
    "kw",
    [
        dict(database="gnomon", primary="us-east1", regions=["us-east1"]),  # primary twice
        dict(database="gnomon", primary='us"east', regions=[]),  # not a region name
        dict(database="gno mon", primary="us-east1", regions=[]),  # not an identifier
        dict(database="gnomon", primary="us-east1", regions=["a", "a"]),  # duplicate
    ],
)
def test_bad_arguments_are_refused(kw):
    with pytest.raises(ValueError):
        D.multiregion_statements(**kw)


def test_cli_refuses_bad_arguments():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gnomon.common.storage.dialect",
            "--database",
            "gnomon",
            "--primary",
            "us-east1",
            "--regions",
            "us-west1",
            "--survive",
            "region",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "at least 3 regions" in r.stderr and r.stdout == ""


# --- table localities cover the schema ------------------------------------------------------------


def test_every_table_gets_exactly_one_locality_keyed_on_its_home_region():
    stmts = mr()
    localities = {}
    added = {}
    for s in stmts[4:]:
        if m := LOCALITY_RE.match(s):
            assert m["table"] not in localities, f"two localities for {m['table']}"
            localities[m["table"]] = "GLOBAL" if m["global"] else m["col"]
        elif m := ADD_COL_RE.match(s):
            added[m["table"]] = m["src"]
        else:
            pytest.fail(f"unexpected statement: {s}")
    assert set(localities) == set(metadata.tables), (
        "every table needs a locality, and only tables of the schema"
    )
    for name, col in localities.items():
        t = metadata.tables[name]
        if name in D.GLOBAL_TABLES:  # identity and tenancy: read in every region on every call
            assert col == "GLOBAL" and "region" not in t.c
        elif "region" in t.c:
            assert col == "crdb_region"
            assert added[name] == "region" and "region" in t.c and not t.c.region.nullable
            # the computed column is added before the locality that names it
            assert stmts.index(
                next(s for s in stmts if ADD_COL_RE.match(s) and f" {name} " in s)
            ) < stmts.index(f"ALTER TABLE {name} SET LOCALITY REGIONAL BY ROW AS crdb_region")
        else:
            assert col is None and name not in added  # hidden crdb_region, gateway region
    assert set(added) == {n for n, t in metadata.tables.items() if "region" in t.c}
    for t in metadata.tables.values():
        assert "crdb_region" not in t.c, (
            "the schema itself must stay portable (PostgreSQL has no crdb_internal_region)"
        )


@pytest.mark.parametrize("name", ["shard_owners", "queue_state", "catchup_budget"])
def test_per_region_config_tables_are_keyed_on_region(name):
    t = metadata.tables[name]
    assert "region" in [c.name for c in t.primary_key.columns]
    assert f"ALTER TABLE {name} SET LOCALITY REGIONAL BY ROW AS crdb_region" in mr()


def test_region_column_is_compiled_by_the_cockroachdb_dialect():
    for t in metadata.tables.values():
        if "region" not in t.c:
            with pytest.raises(ValueError):
                D.region_column_ddl(t)
            continue
        ddl = D.region_column_ddl(t)
        assert ddl in mr()
        assert ADD_COL_RE.match(ddl)["table"] == t.name
    # It is the cockroachdb dialect's own computed-column form: PostgreSQL's compiler renders another.
    from sqlalchemy import Column, Computed, MetaData, Table

    col = Column(
        "crdb_region",
        D._CrdbInternalRegion(),
        Computed("region::crdb_internal_region", persisted=True),
        nullable=False,
    )
    Table("x", MetaData(), col)
    assert (
        str(CreateColumn(col).compile(dialect=CRDB))
        == "crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL"
    )
    assert "GENERATED ALWAYS AS" in str(CreateColumn(col).compile(dialect=postgresql.dialect()))


def test_statements_compile_as_text_without_bind_parameters():
    for s in mr() + D.claim_session_settings() + D.claim_role_defaults("gnomon"):
        compiled = text(s).compile(dialect=CRDB)
        assert compiled.params == {} and str(compiled) == s
        assert ";" not in s


# --- claim transaction settings -------------------------------------------------------------------


def test_claim_settings():
    names = [s.name for s in D.CLAIM_SESSION_SETTINGS]
    assert names == ["enable_durable_locking_for_serializable", "optimizer_use_lock_op_for_serializable"]
    assert D.claim_session_settings() == [f"SET {n} = true" for n in names]
    assert D.claim_role_defaults("gnomon") == [f"ALTER ROLE gnomon SET {n} = true" for n in names]
    with pytest.raises(ValueError):
        D.claim_role_defaults("gnomon; DROP")


def test_claim_session_options_only_on_cockroach():
    assert D.claim_session_options("cockroachdb+psycopg://u@h:26257/gnomon") == {
        "enable_durable_locking_for_serializable": "true",
        "optimizer_use_lock_op_for_serializable": "true",
    }
    assert D.claim_session_options("postgresql+psycopg://u@h/gnomon") == {}


def test_is_cockroach():
    assert D.is_cockroach("cockroachdb+psycopg://u@h:26257/gnomon")
    assert D.is_cockroach("cockroachdb://u@h/db")
    assert D.is_cockroach("cockroachdb") and D.is_cockroach("cockroachdb+psycopg")
    assert not D.is_cockroach("postgresql+psycopg://u@h/db") and not D.is_cockroach("postgresql")
    assert D.is_cockroach(CRDB) and not D.is_cockroach(postgresql.dialect())
    sync = create_engine("cockroachdb+psycopg://u@localhost:1/db")
    asy = create_async_engine("cockroachdb+psycopg://u@localhost:1/db")
    try:
        assert D.is_cockroach(sync) and D.is_cockroach(asy) and D.is_cockroach(sync.url)
    finally:
        sync.dispose()
    with pytest.raises(TypeError):
        D.is_cockroach(42)


# --- the SKIP LOCKED claim queries compile on the cockroachdb dialect ----------------------------


class _Capture:
    """Stands in for a connection only to capture the statement a query function builds (not a database)."""

    def __init__(self):
        self.statements = []

    async def execute(self, stmt, *a, **kw):
        self.statements.append(stmt)

        class _R:
            def mappings(self):
                return []

        return _R()


def _sql(stmt) -> str:
    return " ".join(str(stmt.compile(dialect=CRDB)).split())


async def test_planner_claims_compile_with_skip_locked():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cap = _Capture()
    await planning.claim_due(cap, regions=["us-east1"], now=now, limit=10)
    await planning.claim_buffered(cap, regions=["us-east1"], limit=10)
    assert len(cap.statements) == 2
    for stmt in cap.statements:
        sql = _sql(stmt)
        assert sql.endswith("FOR UPDATE SKIP LOCKED"), sql
        assert (
            "schedules.region IN (__[POSTCOMPILE_region_1])" in sql
        )  # home-region filter: crdb_region is derived from it
        assert "LIMIT %(param_1)s::INTEGER" in sql


def test_dispatcher_claim_compiles_with_skip_locked():
    sql = _sql(claims.CLAIM)
    assert "FOR UPDATE SKIP LOCKED" in sql
    due = sql[sql.index("due AS (") :]
    assert "jobs.region = %(p_region)s" in due and "ORDER BY jobs.scheduled_at LIMIT %(p_limit)s" in due
    # one statement for all targets: a lateral join over the unnest-ed target arrays
    assert "unnest(%(g_ord)s::INTEGER[]" in sql and "JOIN LATERAL (SELECT jobs.id" in sql
    lateral = sql[sql.index("JOIN LATERAL (SELECT jobs.id") :]
    assert lateral.index("FOR UPDATE SKIP LOCKED") < lateral.index(") AS d")


def test_rate_limit_lookups_compile_as_key_lookups_with_row_locks():
    sql = _sql(rate_limits.BUCKETS)
    assert "JOIN queue_limits ON queue_limits.region = %(p_region)s" in sql
    assert sql.endswith("FOR UPDATE OF queue_limits")
    assert "LIMIT" not in _sql(rate_limits.LIMITED)
