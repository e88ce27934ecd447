"""The cluster: live dispatchers, every shard with its owner and fencing tokens, and the regions
seen (``ClusterService``)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from .web import Ctx, page, render

__all__ = ["routes"]


@page
async def cluster(ctx: Ctx) -> Response:
    """``GET /cluster?region=``: dispatchers and shards of ``region`` ("" = the API's own)."""
    region = ctx.field("region")
    dispatchers = await ctx.api.list_dispatchers(region)
    shards = await ctx.api.list_shards(region)
    regions = sorted({d.region for d in dispatchers} | {s.region for s in shards} | ({region} - {""}))
    owners: dict[str, int] = {}
    for s in shards:
        if s.owner:
            owners[s.owner] = owners.get(s.owner, 0) + 1
    return render(
        ctx,
        "cluster.html",
        region=region,
        regions=regions,
        dispatchers=dispatchers,
        shards=shards,
        owners=owners,
        unowned=sum(1 for s in shards if not s.owned),
    )


routes = [Route("/cluster", cluster)]
