"""The cluster: live dispatchers, every shard with its owner and fencing tokens, and the regions
(``ClusterService``).

The API answers for one region at a time and cannot list regions; the regions the console was told
about (``gnomon console --region``) get a summary row each: live dispatchers, shards owned and by whom.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from starlette.responses import Response
from starlette.routing import Route

from .web import Ctx, page, render

__all__ = ["routes", "RegionSummary"]


@dataclass(frozen=True)
class RegionSummary:
    """One region at a glance: ``dispatchers`` live in it, ``shards`` in all, ``unowned`` of them,
    and ``owners`` (dispatcher id -> shards it owns; after a failover, another region's dispatchers)."""

    region: str
    dispatchers: int
    shards: int
    unowned: int
    owners: dict[str, int]


@page
async def cluster(ctx: Ctx) -> Response:
    """``GET /cluster?region=``: a summary of every known region, then the dispatchers and shards of
    ``region`` ("" = the API's own)."""
    region = ctx.field("region")
    dispatchers = await ctx.api.list_dispatchers(region)
    shards = await ctx.api.list_shards(region)
    known: list[str] = ctx.request.app.state.regions
    summaries = []
    for r in known:
        ds = await ctx.api.list_dispatchers(r)
        ss = await ctx.api.list_shards(r)
        owners = Counter(s.owner for s in ss if s.owner)
        summaries.append(RegionSummary(r, len(ds), len(ss), sum(1 for s in ss if not s.owned), dict(owners)))
    seen = {d.region for d in dispatchers} | {s.region for s in shards} | ({region} - {""})
    regions = sorted(seen | set(known))
    owners = Counter(s.owner for s in shards if s.owner)
    return render(
        ctx,
        "cluster.html",
        region=region,
        regions=regions,
        summaries=summaries,
        dispatchers=dispatchers,
        shards=shards,
        owners=dict(owners),
        unowned=sum(1 for s in shards if not s.owned),
    )


routes = [Route("/cluster", cluster)]
