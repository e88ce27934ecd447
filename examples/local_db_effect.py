"""Idempotency at the effect boundary, case 1: the effect is a write to a database you own.

Gnomon runs a job **at least once**. A second attempt of the same job happens when the first one's
outcome is unknown to the scheduler -- the worker crashed, paused past its lease, or its result
(the "ACK") was lost after the effect was done -- and the job was created ``idempotent=True``.
The scheduler cannot know whether the first attempt's effect happened; the effect itself must
make the retry harmless.

For a database you own the rule is: **the mutation and its completion marker commit in ONE
transaction**, and the marker is keyed by the job's idempotency key (the same on every attempt,
:attr:`gnomon.sdk.JobContext.idempotency_key`) under a unique constraint. Then there are only two
possible states after any crash: nothing happened (the transaction rolled back: the retry applies
it) or everything happened (the retry finds the marker and does nothing). There is no window in
between -- which is exactly what a marker written in a *separate* transaction before the effect
gets wrong (docs/idempotency.md, "the marker-first trap").

This example credits an account in a SQLite ledger (``$LEDGER_DB``, default ``ledger.sqlite3``);
the same shape in PostgreSQL is in docs/idempotency.md. Payload::

    {"account": "alice", "amount_cents": 500}

Run it (with ``gnomon dev`` serving the API on 127.0.0.1:7070)::

    LEDGER_DB=/tmp/ledger.sqlite3 PYTHONPATH=. gnomon worker --queue credits --handler examples.local_db_effect:handle

and create jobs with ``Client().create_job("credits", {"account": "alice", "amount_cents": 500},
idempotent=True, idempotency_key="order-42-credit")``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime

from gnomon.sdk import JobContext, PermanentError

log = logging.getLogger("examples.local_db_effect")

SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    id            TEXT PRIMARY KEY,
    balance_cents INTEGER NOT NULL
);
-- One row per applied effect: the completion marker. Its primary key is the idempotency key, so
-- a second insert of the same key fails (or, with ON CONFLICT DO NOTHING, inserts nothing).
CREATE TABLE IF NOT EXISTS effects (
    idempotency_key TEXT PRIMARY KEY,
    job             TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    applied_at      TEXT NOT NULL
);
"""


def ledger_path() -> str:
    """The SQLite file of the ledger: ``$LEDGER_DB`` or ``ledger.sqlite3``."""
    return os.environ.get("LEDGER_DB", "ledger.sqlite3")


@contextlib.contextmanager
def ledger(path: str | None = None) -> Iterator[sqlite3.Connection]:
    """An autocommit connection to the ledger (transactions are explicit: ``BEGIN IMMEDIATE`` takes
    the write lock up front, so concurrent workers queue instead of failing on lock upgrades)."""
    db = sqlite3.connect(path or ledger_path(), timeout=30, isolation_level=None)
    try:
        db.executescript(SCHEMA)
        yield db
    finally:
        db.close()


def credit(db: sqlite3.Connection, account: str, amount_cents: int) -> None:
    """The business mutation: adds ``amount_cents`` to ``account`` (created at 0 if new)."""
    db.execute(
        "INSERT INTO accounts (id, balance_cents) VALUES (?, ?) "
        "ON CONFLICT (id) DO UPDATE SET balance_cents = balance_cents + excluded.balance_cents",
        (account, amount_cents),
    )


def handle(ctx: JobContext) -> str:
    """Credits the account once per idempotency key, however many attempts run.

    Returns ``"applied"`` or ``"already applied"`` (the worker ignores the value; tests read it).
    Raises :class:`~gnomon.sdk.PermanentError` for a malformed payload (retrying cannot fix it).
    """
    try:
        order = ctx.json()
        account, amount = str(order["account"]), int(order["amount_cents"])
    except (ValueError, KeyError, TypeError) as e:
        raise PermanentError(f"bad payload: {e!r}") from None
    with ledger() as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            # The marker and the mutation in ONE transaction. Inserting the marker first inside the
            # transaction is fine (and doubles as the duplicate check): nothing is visible to
            # anyone, including the next attempt, until COMMIT makes both durable together.
            new = db.execute(
                "INSERT INTO effects (idempotency_key, job, attempt, applied_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (idempotency_key) DO NOTHING",
                (ctx.idempotency_key, ctx.job, ctx.attempt, datetime.now(UTC).isoformat()),
            ).rowcount
            if new == 0:
                db.execute("ROLLBACK")
                log.info(
                    "%s attempt %d: effect %s was applied already; nothing to do",
                    ctx.job,
                    ctx.attempt,
                    ctx.idempotency_key,
                )
                return "already applied"
            credit(db, account, amount)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    return "applied"


def balance(account: str, path: str | None = None) -> int:
    """The account's balance in cents (0 if unknown)."""
    with ledger(path) as db:
        row = db.execute("SELECT balance_cents FROM accounts WHERE id = ?", (account,)).fetchone()
    return row[0] if row else 0


def effects(path: str | None = None) -> list[tuple[str, str, int]]:
    """Every applied effect: ``(idempotency_key, job, attempt)``."""
    with ledger(path) as db:
        return db.execute("SELECT idempotency_key, job, attempt FROM effects ORDER BY applied_at").fetchall()
