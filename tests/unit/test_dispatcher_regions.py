"""Construction of a dispatcher's claim path per region (no I/O): the home region and every region a
standby serves get the same parts, the claim loop's retry budget and breakers are required and must be
of its region (the failover loop was once built without them)."""

from __future__ import annotations

from typing import Any

import pytest

from gnomon.common.config import BreakerSettings, DispatcherSettings, RetryBudgetSettings
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.claims import ClaimLoop
from gnomon.dispatcher.region import DispatcherContext, RegionStack
from gnomon.dispatcher.sessions import SessionRegistry

NO_IO: Any = None  # nothing here touches the database or etcd


def context() -> DispatcherContext:
    return DispatcherContext(
        engine=NO_IO,
        etcd=NO_IO,
        registry=SessionRegistry(),
        settings=DispatcherSettings(),
        budget_settings=RetryBudgetSettings(),
        breaker_settings=BreakerSettings(),
        prefix="/p/",
        home_region="b",
        shards=4,
        dispatcher_id="d1",
        address="127.0.0.1:1",
        lease_ttl_s=10,
    )


@pytest.mark.parametrize("region", ["b", "a"])
def test_home_and_standby_stacks_brake_with_their_regions_budget_and_breakers(region):
    stack = RegionStack(context(), region)
    assert stack.shards.standby == (region != "b")
    assert stack.claims.budget is stack.budget and stack.claims.breakers is stack.breakers
    assert (
        stack.budget.region == stack.breakers.region == stack.claims.region == stack.shards.region == region
    )
    assert stack.shards.changed is stack.wake is stack.claims.wake


def test_claim_loop_requires_budget_and_breakers_of_its_region() -> None:
    ctx, stack = context(), RegionStack(context(), "a")
    args = (NO_IO, stack.shards, ctx.registry, stack.relay, ctx.settings)
    with pytest.raises(TypeError):
        ClaimLoop(*args, region="a", dispatcher_id="d1")  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        ClaimLoop(
            *args,
            region="a",
            dispatcher_id="d1",
            budget=RetryBudget(ctx.budget_settings, region="b"),
            breakers=stack.breakers,
        )
