"""Hot statements executed on the driver's connection, below SQLAlchemy's execution layer.

The drain's limit is the dispatcher's CPU per job (bench/README.md). Executing a statement through
SQLAlchemy's asyncio layer costs a greenlet switch, its parameter and result processing and a Row
object per row; for the few statements every job passes through (the claim, the accept, the success
result) that was ~12% of the dispatcher's CPU under the drain (py-spy, 2026-12-01). Used for the
accept and the success result, and for CreateJob's insert, run alone in autocommit (one round trip;
:func:`fetch`). The claim stays on SQLAlchemy: run here, the fault test
``test_sigstop_past_lease_then_sigcont_is_fenced[5-b]`` (a dispatcher paused between its claim
statement and its fence check) failed 3 of 3 times, its resumed claim neither fenced nor finished
within 15 s, and passed through SQLAlchemy; the cause is not understood yet.
These statements stay SQLAlchemy Core objects, registered and compile-checked for PostgreSQL and
CockroachDB like every other (:mod:`gnomon.common.storage.statements`); :func:`fetch` compiles each
once per dialect and runs the SQL text on the psycopg connection of the caller's transaction (or
alone, see :func:`fetch`), as a server-side prepared statement (psycopg ``prepare=True``).

Only statements whose parameters all bind plainly qualify (arrays, scalars; no expanding ``IN``, no
``literal_execute``), and every parameter is passed on each call: SQLAlchemy's bind processors do
not run, so values must be what psycopg adapts natively (``uuid.UUID``, ``int``, ``str``,
``datetime``, ``bytes``, lists of those). On PostgreSQL parameters and results travel in binary
format (:func:`binary_format`): a result column must have a psycopg binary loader (every column of
``jobs`` and ``attempts`` has: uuid, text, integers, float8, bytea, timestamptz, bool), or it would
come back as ``bytes`` instead of what SQLAlchemy returns.
"""

from __future__ import annotations

import re
from typing import Any, cast

import psycopg
from psycopg.pq import ExecStatus
from psycopg.rows import dict_row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

_SQL: dict[tuple[int, str], tuple[str, dict[str, Any]]] = {}
#: A pyformat placeholder ``%(name)s`` not preceded by another ``%`` (``%%`` is an escaped literal).
_PLACEHOLDER = re.compile(r"(?<!%)%\((\w+)\)s")
TUPLES_OK = ExecStatus.TUPLES_OK


def binary_format(dialect: Any) -> bool:
    """Whether statements run here use the binary format (parameters and results) on ``dialect``:
    on PostgreSQL only. CockroachDB keeps the text format until these statements have run against a
    real CockroachDB (CI has none; its pgwire binary encodings of these array types are unverified)."""
    return bool(dialect.name == "postgresql")


def compiled_sql(stmt: ClauseElement, dialect: Any) -> tuple[str, dict[str, Any]]:
    """``(sql, defaults)`` of ``stmt`` for ``dialect``, cached per
    statement object, which must live as long as the process (a module constant); placeholders are
    ``%(name)b`` (binary parameters) where :func:`binary_format`, else ``%(name)s``. ``defaults`` are
    the values of the parameters the statement itself binds (``literal(...)``)."""
    key = (id(stmt), dialect.name)
    got = _SQL.get(key)
    if got is None:
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect))
        # the values the statement binds itself (literals, NULLs of .values(x=None)); the required
        # parameters are the caller's
        required = {name for name, bind in compiled.binds.items() if bind.required}
        defaults = {k: v for k, v in compiled.construct_params(_check=False).items() if k not in required}
        sql = compiled.string
        if binary_format(dialect):
            # every parameter in binary format (``%(name)b``): psycopg's text dumping of arrays costs
            # ~5x more CPU (three 200-element arrays of uuid, int, uuid: 807 us as text, 152 us
            # binary, measured 2026-12-02), and bytea payloads skip the hex encoding; ``%%`` stays a
            # literal %
            sql = _PLACEHOLDER.sub(r"%(\1)b", sql)
        got = _SQL[key] = (sql, defaults)
    return got


async def fetch(
    conn: AsyncConnection, stmt: ClauseElement, params: dict[str, Any], *, mappings: bool = False
) -> list[Any]:
    """Executes ``stmt`` with ``params`` on ``conn``'s psycopg connection and returns every row
    (tuples, or dicts by column name with ``mappings``; ``[]`` for a statement without result rows).

    Inside ``conn``'s transaction when it has one. On a connection outside any transaction
    (``engine.connect()``, see :func:`gnomon.common.storage.engine.run_transaction`
    ``single_statement``) the statement runs alone in autocommit, as its own transaction (one round
    trip instead of ``BEGIN``, statement, ``COMMIT``); the connection goes back to transaction mode
    afterwards, or is invalidated if that fails.

    A driver error is raised as SQLAlchemy's matching ``DBAPIError`` subclass (``OperationalError``,
    ``DataError``, ...; parameters hidden), so callers and ``run_transaction`` treat it as any other
    statement's. A lost connection (psycopg reports it closed or broken) is invalidated together with
    every pooled connection opened before it, as SQLAlchemy does for its own statements, so the next
    transactions after a database restart get fresh connections."""
    sql, defaults = compiled_sql(stmt, conn.dialect)
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None
    single = not conn.in_transaction() and not raw.autocommit
    cur = raw.cursor(row_factory=dict_row) if mappings else raw.cursor()
    try:
        if single:
            await raw.set_autocommit(True)
        await cur.execute(
            sql,
            {**defaults, **params} if defaults else params,
            prepare=True,
            binary=binary_format(conn.dialect),
        )
        # not ``cur.description``: it builds a Column object per column of every result (~0.2 ms
        # for the 42 columns of a ``jobs`` row, measured with yappi under 64 concurrent CreateJob)
        res = cur.pgresult
        return await cur.fetchall() if res is not None and res.status == TUPLES_OK else []
    except psycopg.Error as exc:
        lost = raw.closed or raw.broken
        if lost:
            await _invalidate(conn, exc)
        raise DBAPIError.instance(
            sql,
            None,
            exc,
            psycopg.Error,
            hide_parameters=True,
            connection_invalidated=lost,
            dialect=conn.dialect,
        ) from exc
    finally:
        await cur.close()
        if single and not conn.invalidated:
            try:
                await raw.set_autocommit(False)
            except psycopg.Error as exc:  # never hand the pool a connection left in autocommit
                await _invalidate(conn, exc)


async def _invalidate(conn: AsyncConnection, exc: BaseException) -> None:
    """Discards ``conn``'s pooled connection and marks every connection the pool opened before it
    for replacement at its next checkout: what SQLAlchemy's own disconnect handling does
    (``Pool._invalidate``, the pool's generation), which a statement run here bypasses."""
    if conn.invalidated:
        return
    fairy = conn.sync_connection.connection if conn.sync_connection is not None else None
    if fairy is not None:
        conn.sync_engine.pool._invalidate(fairy, exc, _checkin=False)  # the older ones: replaced later
    await conn.invalidate(exc)  # this one: now
