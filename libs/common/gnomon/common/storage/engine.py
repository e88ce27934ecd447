"""Engines and the one transaction helper every write goes through.

:func:`run_transaction` retries the **whole** transaction on SQLSTATE 40001 (serialization failure,
CockroachDB's "restart transaction") with capped, jittered exponential backoff and a bound, as
CockroachDB requires of clients (https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference).
``sqlalchemy_cockroachdb.run_transaction`` is not used: it is sync-only, unbounded by default, and its
savepoint restart cannot fix a real PostgreSQL serialization failure (a retry inside the same
snapshot fails again every time).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from gnomon.common.config import DatabaseSettings
from gnomon.common.errors import Unavailable

T = TypeVar("T")

#: The message of :class:`Unavailable` by ``single_statement``: a statement in autocommit may have
#: committed before the connection was lost (a request id makes the caller's retry safe).
_UNAVAILABLE = {
    False: "database unavailable; nothing was written",
    True: "database unavailable; the write may or may not have been committed (retry with the same "
    "request_id to be safe)",
}

#: SQLSTATEs retried by :func:`run_transaction`: serialization failure and deadlock detected.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def make_engine(
    settings: DatabaseSettings,
    *,
    pool_size: int | None = None,
    session_options: dict[str, int | str] | None = None,
) -> AsyncEngine:
    """An async engine (psycopg 3) for ``settings.url``; each connection gets a statement timeout
    and the extra ``session_options`` (server settings set at connect, e.g.
    ``{"idle_in_transaction_session_timeout": 30000}``; PostgreSQL and CockroachDB both accept it).
    Opening a connection is bounded by ``settings.connect_timeout_s`` (``GNOMON_DATABASE_CONNECT_TIMEOUT_S``,
    default 2 s), so an unreachable database fails requests fast with UNAVAILABLE.

    Bound parameter values are hidden from SQLAlchemy's exception messages (``hide_parameters``), so
    a failing statement never copies client input (job payloads, error texts, names) into a log line.

    Raises ``ValueError`` if the URL is empty.
    """
    if not settings.url:
        raise ValueError("GNOMON_DATABASE_URL is not set")
    size = pool_size or settings.pool_size
    # No pool_pre_ping: it costs a round trip per checkout. A connection broken by a database restart
    # fails its next transaction with UNAVAILABLE (nothing committed) and is discarded by the pool.
    return create_async_engine(
        settings.url,
        # bound values (client text, payloads) never appear in exception messages, hence never in logs
        hide_parameters=True,
        pool_size=size,
        max_overflow=size,
        pool_recycle=300,
        connect_args={
            "options": " ".join(
                f"-c {k}={v}"
                for k, v in {
                    "statement_timeout": settings.statement_timeout_ms,
                    **(session_options or {}),
                }.items()
            ),
            "connect_timeout": settings.connect_timeout_s,
        },
    )


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a DBAPI error, if any."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "sqlstate", None) or getattr(exc, "sqlstate", None)


async def run_transaction(
    engine: AsyncEngine,
    fn: Callable[[AsyncConnection], Awaitable[T]],
    *,
    max_attempts: int = 10,
    base_delay_s: float = 0.005,
    max_delay_s: float = 0.5,
    single_statement: bool = False,
) -> T:
    """Runs ``fn(conn)`` as one transaction, retrying the whole of it on 40001/40P01.

    By default inside ``BEGIN ... COMMIT`` (``engine.begin()``). ``single_statement``: ``fn`` runs one
    statement through :func:`gnomon.common.storage.raw.fetch` on a connection outside any transaction,
    which runs it alone in autocommit (one round trip; a single statement is atomic). Should ``fn``
    run a SQLAlchemy statement first, that one opens a transaction, the raw one joins it and both
    commit together here: still one transaction, only without the saving. A connection lost during
    the statement leaves it unknown whether it committed (as a lost ``COMMIT`` does), and the
    :class:`Unavailable` says so.

    Backoff before retry k (1-based) is uniform in ``[0, min(max_delay_s, base_delay_s * 2**k)]``
    seconds. After ``max_attempts`` the last error propagates. Connection failures raise
    :class:`gnomon.common.errors.Unavailable` at once (nothing buffered; the caller decides).
    ``fn`` must be safe to run again (no side effects outside the transaction).
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            if single_statement:
                async with engine.connect() as conn:
                    out = await fn(conn)
                    if conn.in_transaction():  # fn ran a SQLAlchemy statement too: commit it all
                        await conn.commit()
                    return out
            async with engine.begin() as conn:
                return await fn(conn)
        except DBAPIError as exc:
            if sqlstate(exc) in RETRYABLE_SQLSTATES and attempt < max_attempts:
                await asyncio.sleep(random.uniform(0, min(max_delay_s, base_delay_s * (2**attempt))))
                continue
            if (
                isinstance(exc, (OperationalError, InterfaceError))
                and sqlstate(exc) not in RETRYABLE_SQLSTATES
            ):
                raise Unavailable(_UNAVAILABLE[single_statement]) from exc
            raise
        except OSError as exc:
            raise Unavailable(_UNAVAILABLE[single_statement]) from exc
