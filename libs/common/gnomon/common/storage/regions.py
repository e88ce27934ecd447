"""Named queries of home-region ownership (``region_owners``): which region acts for a home region,
under which region-level fencing token (docs/regions.md).

The token is the etcd ``create_revision`` of the region ownership key
(:func:`gnomon.common.coordination.registry.region_key`); like shard tokens it only ever grows, so
after a failover (standby region takes the key) and a fail-back (the home region takes it again)
the previous holder's token is smaller and :func:`check_region_fence` rejects its writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningInsert

from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage.schema import region_owners as ro
from gnomon.common.storage.statements import builder


@builder(region="r", owner_region="r", owner="d", token=1)
def record_region_stmt(region: str, owner_region: str, owner: str, token: int) -> ReturningInsert[Any]:
    """Upserts ``region_owners`` row ``region``: ``owner_region`` (dispatcher ``owner``) acts for
    it under fencing ``token`` (an etcd create revision), ``acquired_at = now()``; the update applies
    only when the recorded token is not larger. Returns the token when the row was written."""
    stmt = pg_insert(ro).values(
        region=region, owner_region=owner_region, owner=owner, token=token, acquired_at=func.now()
    )
    return stmt.on_conflict_do_update(
        index_elements=["region"],
        set_=dict(
            owner_region=stmt.excluded.owner_region,
            owner=stmt.excluded.owner,
            token=stmt.excluded.token,
            acquired_at=func.now(),
        ),
        where=ro.c.token <= stmt.excluded.token,
    ).returning(ro.c.token)


@builder(region="r")
def region_token_stmt(region: str) -> Select[tuple[int]]:
    """The recorded token of home region ``region``, its row locked ``FOR SHARE``."""
    return select(ro.c.token).where(ro.c.region == region).with_for_update(read=True)


@builder(home="r")
def served_regions_stmt(home: str) -> Select[tuple[str]]:
    """The home regions whose recorded owner region is ``home``."""
    return select(ro.c.region).where(ro.c.owner_region == home)


@builder()
def owners_stmt() -> Select[Any]:
    """Every ``region_owners`` row (all columns), ordered by region."""
    return select(ro).order_by(ro.c.region)


async def record_region_ownership(
    conn: AsyncConnection, *, region: str, owner_region: str, owner: str, token: int
) -> None:
    """Records that ``owner_region`` (dispatcher ``owner``) acts for home region ``region`` under
    ``token``, never lowering the token. Raises :class:`StaleFencingToken` if a token >= ``token``
    is recorded already."""
    stmt = record_region_stmt(region, owner_region, owner, token)
    if (await conn.execute(stmt)).first() is None:
        raise StaleFencingToken(
            f"region {region}: token {token} is older than the recorded one",
            metadata={"region": region, "token": str(token)},
        )


async def check_region_fence(conn: AsyncConnection, *, region: str, token: int) -> None:
    """Takes a shared lock on home region ``region``'s row and checks ``token`` is the recorded one,
    so a fail-over or fail-back (which updates the row) waits for in-flight claims and every later
    claim under the old token fails. Raises :class:`StaleFencingToken` (metadata ``region``)."""
    got = (await conn.execute(region_token_stmt(region))).scalar()
    if got != token:
        raise StaleFencingToken(
            f"region {region}: token {token} is not the current one ({got})",
            metadata={"region": region, "token": str(token)},
        )


async def served_regions(conn: AsyncConnection, *, home: str) -> list[str]:
    """Home regions whose recorded owner is region ``home`` (itself included when recorded), sorted."""
    rows = await conn.execute(served_regions_stmt(home))
    return sorted({r[0] for r in rows})


async def owners(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every ``region_owners`` row (region, owner_region, owner, token, acquired_at)."""
    return [dict(r) for r in (await conn.execute(owners_stmt())).mappings()]
