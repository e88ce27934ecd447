"""Read side of ``shard_owners``: the fencing token each shard's owner recorded (what claims check)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.schema import shard_owners
from gnomon.common.storage.statements import builder


@builder(region="r")
def shard_owners_stmt(region: str) -> Select[tuple[int, int, str, datetime]]:
    """``(shard, token, owner, acquired_at)`` of every recorded shard of ``region``."""
    return select(
        shard_owners.c.shard, shard_owners.c.token, shard_owners.c.owner, shard_owners.c.acquired_at
    ).where(shard_owners.c.region == region)


async def list_shard_owners(conn: AsyncConnection, region: str) -> dict[int, dict[str, Any]]:
    """shard -> ``{"token", "owner", "acquired_at"}`` for every recorded shard of ``region``."""
    rows = await conn.execute(shard_owners_stmt(region))
    return {r.shard: {"token": r.token, "owner": r.owner, "acquired_at": r.acquired_at} for r in rows}
