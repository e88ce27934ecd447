"""Every named SQL statement of the storage layer compiles for both dialects (PostgreSQL, and
CockroachDB through sqlalchemy-cockroachdb), and no statement escapes the registry.

The registry (gnomon.common.storage.statements.REGISTRY) is filled as the storage modules are
imported: prebuilt statements through ``named(...)``, statement builders through ``@builder(...)``
with sample arguments. Two structural checks keep it complete: every module-level statement object
is registered, and no function outside a registered builder constructs a statement
(``select``/``insert``/``update``/``delete``/``pg_insert``/``text``).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.elements import ClauseElement

import gnomon.common.storage as storage_pkg
from gnomon.common.storage import dialect as D
from gnomon.common.storage.statements import REGISTRY

STORAGE_DIR = Path(storage_pkg.__file__).parent
MODULES = sorted(
    m.name
    for m in pkgutil.iter_modules([str(STORAGE_DIR)], prefix="gnomon.common.storage.")
    if not m.name.endswith(".migrations")
)
for _name in MODULES:
    importlib.import_module(_name)

DIALECTS = {"postgresql": postgresql.psycopg.dialect(), "cockroachdb": D.cockroach_dialect()}
#: Names of the functions that build SQL statements.
CONSTRUCTORS = {"select", "insert", "update", "delete", "pg_insert", "text", "union_all", "exists"}


def _statements(built: Any) -> list[Executable]:
    return list(built) if isinstance(built, tuple | list) else [built]


def test_the_registry_is_not_empty() -> None:
    assert len(REGISTRY) > 50


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_statement_compiles(name: str, dialect: str) -> None:
    entry = REGISTRY[name]
    assert entry.doc.strip(), f"{name} has no docstring"
    for stmt in _statements(entry.build()):
        assert isinstance(stmt, Executable), f"{name} built {type(stmt).__name__}, not a statement"
        kw: dict[str, Any] = {}
        if getattr(stmt, "is_insert", False) and getattr(stmt, "select", None) is None:
            # an INSERT executed with parameter rows: compile it with every column given
            kw["column_keys"] = [c.key for c in stmt.table.c]  # type: ignore[attr-defined]
        # the statements (select/insert/update/delete/text) are ClauseElements as well as Executables
        sql = str(cast(ClauseElement, stmt).compile(dialect=DIALECTS[dialect], **kw))
        assert sql.strip()


@pytest.mark.parametrize("module", MODULES)
def test_every_module_level_statement_is_registered(module: str) -> None:
    mod = importlib.import_module(module)
    registered = {id(s) for e in REGISTRY.values() if e.prebuilt for s in _statements(e.build())}
    loose = [
        attr
        for attr, value in vars(mod).items()
        if isinstance(value, Executable)
        and isinstance(value, ClauseElement)
        and getattr(value, "is_dml", False) | getattr(value, "is_select", False)
        and id(value) not in registered
        and not attr.startswith("_")
    ]
    assert not loose, f"{module}: statements not registered with named(): {loose}"


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    out = set()
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        out.add(target.id if isinstance(target, ast.Name) else getattr(target, "attr", ""))
    return out


@pytest.mark.parametrize("module", MODULES)
def test_no_statement_is_built_outside_a_registered_builder(module: str) -> None:
    """A function builds SQL only if it is a registered ``@builder`` (or a ``_build_*`` helper run
    once at import for a ``named`` constant); everything else executes named statements."""
    path = STORAGE_DIR / (module.rsplit(".", 1)[1] + ".py")
    tree = ast.parse(path.read_text())
    bad = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if "builder" in _decorators(fn) or fn.name.startswith("_build"):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in CONSTRUCTORS
            ):
                bad.append(f"{fn.name}:{node.lineno}")
    assert not bad, f"{module}: SQL built outside a named builder at {bad}"


def test_builders_have_docstrings_naming_their_module() -> None:
    for name, entry in REGISTRY.items():
        assert "." in name and not name.startswith("gnomon."), name
        assert len(entry.doc.split()) >= 5, f"{name}: the docstring must say what the statement does"


def test_a_new_job_row_binds_exactly_the_raw_insert_columns() -> None:
    """``INSERT_JOB`` runs on the driver (``storage.raw``), where a column missing from the row is a
    KeyError, not a default: every key of ``NewJob.row()`` must be one of its bound columns and
    every bound column a key, for plain, deadline-bearing and idempotent jobs alike."""
    import uuid
    from datetime import UTC, datetime

    from gnomon.common.storage.jobs import NEW_JOB_COLUMNS
    from gnomon_test_support import new_job_spec as new_job

    for job in (
        new_job(),
        new_job(deadline=datetime(2030, 1, 1, tzinfo=UTC)),
        new_job(request_id=uuid.uuid4(), request_hash="h", trace_context="00-ab-cd-01"),
    ):
        assert sorted(job.row()) == sorted(NEW_JOB_COLUMNS)


def test_only_plain_jobs_insert_in_one_statement() -> None:
    import uuid
    from datetime import UTC, datetime, timedelta

    from gnomon.common.storage import jobs as jobs_store
    from gnomon_test_support import new_job_spec

    assert jobs_store.inserts_in_one_statement(new_job_spec())
    assert jobs_store.inserts_in_one_statement(
        new_job_spec(schedule_at=datetime(2030, 1, 1, tzinfo=UTC), deadline=datetime(2030, 1, 2, tzinfo=UTC))
    )
    # a request id may need a second statement (read the original); a deadline relative to the
    # database clock needs one before (read now())
    assert not jobs_store.inserts_in_one_statement(new_job_spec(request_id=uuid.uuid4(), request_hash="h"))
    assert not jobs_store.inserts_in_one_statement(
        new_job_spec(delay=timedelta(seconds=5), deadline=datetime(2030, 1, 2, tzinfo=UTC))
    )


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_statements_run_below_sqlalchemy_are_binary_on_postgresql_only(dialect: str) -> None:
    from sqlalchemy import literal_column, select

    from gnomon.common.storage import jobs, leases, raw, results

    binary = dialect == "postgresql"  # CockroachDB keeps the text format (raw.binary_format)
    assert raw.binary_format(DIALECTS[dialect]) is binary
    hot = [jobs.INSERT_JOB, jobs.INSERT_JOB_IDEMPOTENT, jobs.INSERT_JOBS, jobs.GET_JOB]
    hot += [leases.ACCEPT, results.FINISH_ATTEMPTS, results.SUCCEED_JOBS]
    for stmt in hot:
        sql, _ = raw.compiled_sql(stmt, DIALECTS[dialect])
        binds = re.findall(r"(?<!%)%\(\w+\)([bs])", sql)
        assert binds and set(binds) == ({"b"} if binary else {"s"}), sql
    # a literal percent sign (compiled as %%), even one that reads like a placeholder, stays literal
    pct: Any = select(literal_column("'50%'").label("x"), literal_column("'%(x)s'").label("y"))
    sql, _ = raw.compiled_sql(pct, DIALECTS[dialect])
    assert "'50%%'" in sql and "'%%(x)s'" in sql and ")b" not in sql


def test_every_column_raw_statements_return_has_a_binary_loader() -> None:
    """Binary results (raw.binary_format): a column type without a psycopg binary loader would come
    back as bytes instead of the value SQLAlchemy returns."""
    import psycopg
    from psycopg import pq

    from gnomon.common.storage.schema import attempts, jobs

    aliases = {"timestamp with time zone": "timestamptz", "double precision": "float8"}
    missing = []
    for table in (jobs, attempts):
        for col in table.c:
            name = col.type.compile(dialect=DIALECTS["postgresql"]).split("(")[0].lower()
            info = psycopg.adapters.types.get(aliases.get(name, name))
            if info is None or psycopg.adapters.get_loader(info.oid, pq.Format.BINARY) is None:
                missing.append(f"{table.name}.{col.name} ({name})")
    assert not missing
