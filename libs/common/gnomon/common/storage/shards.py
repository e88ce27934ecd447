"""Read side of ``shard_owners``: the fencing token each shard's owner recorded (what claims check)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.schema import shard_owners


async def list_shard_owners(conn: AsyncConnection, region: str) -> dict[int, dict]:
    """shard -> ``{"token", "owner", "acquired_at"}`` for every recorded shard of ``region``."""
    rows = await conn.execute(
        select(
            shard_owners.c.shard, shard_owners.c.token, shard_owners.c.owner, shard_owners.c.acquired_at
        ).where(shard_owners.c.region == region)
    )
    return {r.shard: {"token": r.token, "owner": r.owner, "acquired_at": r.acquired_at} for r in rows}
