"""Shard fencing (docs/concepts.md, "Coordination"): the owner of a shard records its etcd token in
``shard_owners`` (:func:`record_ownership`, only ever raising the token); every claim or
re-publication transaction then re-checks ``(region, shard, token)`` against that row *inside the same
transaction* (:func:`check_fence`) and aborts with :class:`StaleFencingToken` if a newer owner
recorded a larger token. The check takes the row lock, so a hand-over waits for an in-flight claim to
commit.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, bindparam, func
from sqlalchemy.dialects.postgresql import insert as pg_insert  # only for ON CONFLICT
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.expression import update

from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage.batches import row_params, unnest_rows
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


async def check_fence(conn: AsyncConnection, region: str, tokens: dict[int, int]) -> None:
    """Locks the ``shard_owners`` rows of ``tokens`` (shard -> token) and checks each token is current.

    Raises :class:`StaleFencingToken` (metadata ``shards``: the stale ones) otherwise; the caller's
    transaction must then roll back.
    """
    if not tokens:
        return
    params = {"p_region": region, **row_params("f", shard=list(tokens), token=list(tokens.values()))}
    rows = (await conn.execute(FENCE, params)).scalars().all()
    stale = sorted(set(tokens) - set(rows))
    if stale:
        raise StaleFencingToken(
            f"fencing token is stale for shards {stale}", metadata={"shards": ",".join(map(str, stale))}
        )
