"""Shard fencing (docs/concepts.md, "Coordination"): the owner of a shard records its etcd token in
``shard_owners`` (:func:`record_ownership`, only ever raising the token); every claim or
re-publication transaction then re-checks ``(region, shard, token)`` against that row *inside the same
transaction* (:func:`check_fence`) and aborts with :class:`StaleFencingToken` if a newer owner
recorded a larger token. The check takes the row lock, so a hand-over waits for an in-flight claim to
commit.

Every shard-scoped write runs through :func:`run_fenced`, the one place these checks happen: it opens
the transaction, checks the region fence (:func:`gnomon.common.storage.regions.check_region_fence`)
first, runs the unit of work, and before the commit checks the fence of every shard the work touched
and that the etcd lease is still trusted locally. The storage functions that write shard-scoped
rows (the claim, the outbox re-publication) take the :class:`Fenced` transaction it hands them, never a
bare connection, so none can run outside it. The shape is Temporal's ``txExecuteShardLocked``
(``common/persistence/sql/execution.go``: one transaction that read-locks the shard row and compares
its range id, runs the work, and commits), with the shard check moved after the work so that only the
shards it wrote are locked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import BigInteger, Integer, Select, bindparam, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert  # only for ON CONFLICT
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.expression import update

from gnomon.common import faults
from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.regions import check_region_fence
from gnomon.common.storage.schema import shard_owners
from gnomon.common.storage.statements import builder, named

_F = unnest_rows("f", shard=Integer, token=BigInteger)
FENCE = named(
    __name__,
    "FENCE",
    """Locks and checks the fence of a batch of shards of region ``p_region``: one row per
    ``(f_shard, f_token)`` pair (arrays of shard numbers and fencing tokens); returns the shards whose
    recorded token equals the given one (a no-op update that takes the row lock).""",
    update(shard_owners)
    .where(
        shard_owners.c.region == bindparam("p_region"),
        shard_owners.c.shard == _F.c.shard,
        shard_owners.c.token == _F.c.token,
    )
    .values(token=shard_owners.c.token)
    .returning(shard_owners.c.shard),
)


@builder(region="r", shard=0, token=1, owner="d")
def record_ownership_stmt(region: str, shard: int, token: int, owner: str) -> ReturningInsert[tuple[int]]:
    """Upserts ``shard_owners`` ``(region, shard)`` with fencing ``token`` (an etcd create revision)
    and ``owner`` (a dispatcher id), ``acquired_at = now()``; the update only applies when the
    recorded token is not larger, and returns the token when the row was written (nothing when a
    newer owner holds the shard)."""
    stmt = pg_insert(shard_owners).values(
        region=region, shard=shard, token=token, owner=owner, acquired_at=func.now()
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["region", "shard"],
        set_=dict(token=stmt.excluded.token, owner=stmt.excluded.owner, acquired_at=func.now()),
        where=shard_owners.c.token <= stmt.excluded.token,
    )
    return stmt.returning(shard_owners.c.token)


async def record_ownership(conn: AsyncConnection, region: str, shard: int, token: int, owner: str) -> None:
    """Records ``token`` as the fencing token of ``(region, shard)``, never lowering it.

    Raises :class:`StaleFencingToken` if a token >= ``token`` from another owner is recorded already.
    """
    row = (await conn.execute(record_ownership_stmt(region, shard, token, owner))).first()
    if row is None:
        raise StaleFencingToken(
            f"shard {region}/{shard}: token {token} is older than the recorded one",
            metadata={"shard": str(shard), "token": str(token)},
        )


async def check_fence(
    conn: AsyncConnection,
    region: str,
    tokens: dict[int, int],
    *,
    read: tuple[Select[Any], dict[str, Any]] | None = None,
) -> Any:
    """Locks the ``shard_owners`` rows of ``tokens`` (shard -> token) and checks each token is current.
    With ``read`` (a prebuilt one-column SELECT of at most one row and its parameters), runs it in
    the same statement (:func:`fence_and_read`: one round trip) and returns its value; else None.

    Raises :class:`StaleFencingToken` (metadata ``shards``: the stale ones) otherwise; the caller's
    transaction must then roll back.
    """
    fence = {"p_region": region, **row_params("f", shard=list(tokens), token=list(tokens.values()))}
    if read is not None:
        fenced, value = (await conn.execute(fence_and_read(read[0]), {**read[1], **fence})).one()
        _raise_stale(tokens, fenced or [])
        return value
    if tokens:
        _raise_stale(tokens, (await conn.execute(FENCE, fence)).scalars().all())
    return None


_WITH_READ: dict[int, Select[Any]] = {}


def _build_fence_and_read(read: Select[Any]) -> Select[Any]:
    f = FENCE.cte("fenced_shards")
    return select(
        select(func.array_agg(f.c.shard)).scalar_subquery().label("fenced"),
        read.scalar_subquery().label("value"),
    )


def fence_and_read(read: Select[Any]) -> Select[Any]:
    """One statement: :data:`FENCE` (the shard fences ``(f_shard, f_token)`` of region ``p_region``,
    locked and checked) and the one-column, at-most-one-row ``read`` (a prebuilt module constant,
    with its own parameters) as a scalar subquery; returns one row ``(fenced, value)``: the array
    of shards whose token matched (NULL when none), and the read's value. Built once per ``read``."""
    got = _WITH_READ.get(id(read))
    if got is None:
        got = _WITH_READ[id(read)] = _build_fence_and_read(read)
    return got


def _raise_stale(tokens: Mapping[int, int], fenced: Iterable[int]) -> None:
    stale = sorted(set(tokens) - set(fenced))
    if stale:
        raise StaleFencingToken(
            f"fencing token is stale for shards {stale}", metadata={"shards": ",".join(map(str, stale))}
        )


T = TypeVar("T")


class LeaseNotTrusted(Exception):
    """Raised by :func:`run_fenced` (rolling its transaction back) when the unit of work touched a
    shard and the etcd session lease was no longer locally trusted just before the commit."""


@dataclass(frozen=True)
class Fence:
    """What a fenced unit of work must still hold when it commits: home region ``region`` under the
    region-level token ``region_token`` (an etcd create revision, :mod:`gnomon.common.storage.regions`),
    the shards ``tokens`` (shard number -> fencing token, etcd create revisions) and a locally trusted
    etcd lease (``trusted()``, called just before the commit)."""

    region: str
    tokens: Mapping[int, int]
    region_token: int
    trusted: Callable[[], bool]


class Fenced:
    """The transaction of one :func:`run_fenced` unit: its connection ``conn`` and the ``region``
    and ``tokens`` (shard -> token) it may write under. A storage function that writes a shard's rows
    calls :meth:`touch` with the shards it wrote, and the fence of each is checked before the commit.
    Only :func:`run_fenced` makes one."""

    __slots__ = ("conn", "read", "read_value", "region", "tokens", "touched")

    def __init__(self, conn: AsyncConnection, fence: Fence) -> None:
        self.conn = conn
        self.region = fence.region
        self.tokens: Mapping[int, int] = fence.tokens
        self.touched: set[int] = set()
        self.read: tuple[Select[Any], dict[str, Any]] | None = None
        self.read_value: Any = None

    def read_at_commit(self, read: Select[Any], params: dict[str, Any]) -> None:
        """Asks for ``read`` (a prebuilt one-column SELECT of at most one row; its parameters
        ``params``) to run in the same statement as the shard-fence check just before the commit
        (:func:`fence_and_read`: one round trip where there were two), after the unit of work; its
        value is :attr:`read_value` once :func:`run_fenced` returned (None if it raised). The last
        call wins."""
        self.read = (read, params)

    def touch(self, shards: Iterable[int]) -> None:
        """Records that this transaction wrote rows of ``shards``. Raises ``KeyError`` for a shard
        outside :attr:`tokens` (one this process does not own)."""
        for s in shards:
            if s not in self.tokens:
                raise KeyError(f"shard {s} is not owned by this fenced transaction")
            self.touched.add(s)


async def run_fenced(
    engine: AsyncEngine,
    fence: Fence,
    fn: Callable[[Fenced], Awaitable[T]],
    *,
    fault_point: str | None = None,
) -> T:
    """Runs ``fn`` as one transaction (:func:`run_transaction`: retried whole on 40001/40P01) that
    commits only under ``fence``: the region fence is checked (and its row locked ``FOR SHARE``)
    before ``fn`` runs; after it, the shards ``fn`` touched are locked and their tokens checked, and
    if it touched any, the lease must still be trusted; a read the unit asked for with
    :meth:`Fenced.read_at_commit` runs in the fence check's statement. ``fault_point`` (test-only,
    :mod:`gnomon.common.faults`) fires after those checks, just before the commit, when a shard was
    touched. Returns what ``fn`` returned.

    Raises :class:`StaleFencingToken` (metadata ``region``, or ``shards``: the stale ones) or
    :class:`LeaseNotTrusted`; either way nothing of the unit is committed.
    """

    async def tx(conn: AsyncConnection) -> T:
        await check_region_fence(conn, region=fence.region, token=fence.region_token)
        fx = Fenced(conn, fence)
        out = await fn(fx)
        if fx.touched or fx.read is not None:
            tokens = {s: fence.tokens[s] for s in fx.touched}
            fx.read_value = await check_fence(conn, fence.region, tokens, read=fx.read)
        if fx.touched:
            if not fence.trusted():
                raise LeaseNotTrusted("etcd lease not trusted any more")
            if fault_point:
                faults.point(fault_point)
        return out

    return await run_transaction(engine, tx)
