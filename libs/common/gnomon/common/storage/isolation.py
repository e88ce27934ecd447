"""Batched writes where one bad item must not fail its neighbours (docs/security.md: one client's
input cannot stop another's work).

A batch the database refuses because of what one item holds (a NUL in a text, a value out of range,
a constraint) is split in halves and retried until the bad items stand alone: :func:`commit_isolated`.
Used by the dispatcher's write batcher (accepts, heartbeats, results) and the API's audit log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DataError, IntegrityError

from gnomon.common.storage.engine import sqlstate

T = TypeVar("T")
R = TypeVar("R")

#: SQLSTATE classes that blame the data written, not the database: 22 data exception (e.g. a NUL
#: in a text: 22021), 23 integrity constraint violation.
ITEM_SQLSTATE_CLASSES = ("22", "23")


def item_fault(exc: BaseException) -> bool:
    """True when ``exc`` (raised by a batch's transaction) blames what an item holds rather than the
    database: SQLAlchemy ``DataError``/``IntegrityError`` (psycopg refuses a NUL in a text this way,
    before sending), SQLSTATE class 22 or 23, or a Python ``ValueError``/``OverflowError`` raised while
    binding a value. Connection loss, serialization failures and other errors are not."""
    if isinstance(exc, (DataError, IntegrityError, ValueError, OverflowError)):
        return True
    state = sqlstate(exc)
    return state is not None and state[:2] in ITEM_SQLSTATE_CLASSES


async def commit_isolated(
    batch: list[T],
    commit: Callable[[list[T]], Awaitable[R]],
    *,
    committed: Callable[[list[T], R], None],
    refused: Callable[[T, BaseException], None],
    failed: Callable[[list[T], BaseException], None] | None = None,
) -> None:
    """Commits ``batch`` with ``commit`` (one transaction; returns what ``committed`` gets with the
    part it wrote). When the database refuses it for an item's content (:func:`item_fault`), commits
    the two halves apart (bisection, ``2 * log2(len(batch))`` extra transactions per bad item) down to
    the single bad items, each handed to ``refused(item, error)``; the others commit.

    A transient failure (connection lost, serialization retries exhausted) calls ``failed(part,
    error)`` for the part being committed and for every part not tried yet, and propagates: parts
    committed before it stay committed (``committed`` was called for them), and every item of
    ``batch`` is resolved one way or the other (a caller waiting on an item is never left hanging)."""
    try:
        out = await commit(batch)
    except Exception as exc:
        if not item_fault(exc):
            if failed is not None:
                failed(batch, exc)
            raise
        if len(batch) > 1:
            mid = len(batch) // 2
            parts = (batch[:mid], batch[mid:])
            for i, part in enumerate(parts):
                try:
                    await commit_isolated(part, commit, committed=committed, refused=refused, failed=failed)
                except Exception as transient:
                    if failed is not None:
                        for untried in parts[i + 1 :]:
                            failed(untried, transient)
                    raise
            return
        refused(batch[0], exc)
        return
    committed(batch, out)
