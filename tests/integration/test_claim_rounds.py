"""The claim round's cost does not grow with the number of (namespace, queue) targets, and every
namespace is in every round: a real claim loop on real PostgreSQL, with the streams of a
tenant holding 5,000 targets registered beside one of another tenant.

Before the change the round ran one claim query (and one retry-budget read) per target, so its
statements grew with the targets; now a round names at most ``claim_targets`` targets in one claim
statement, shared evenly across namespaces first.
"""

from __future__ import annotations

import math
import time
from functools import partial

import pytest
from sqlalchemy import event

from gnomon.common.config import BreakerSettings, DispatcherSettings, RetryBudgetSettings
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import rate_limits, regions
from gnomon.common.storage.engine import run_transaction
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.claims import ClaimLoop
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon_test_support import new_job_spec, own_shards

pytestmark = pytest.mark.asyncio
TOKEN = 5
K = 64  # targets per round in these tests


class Shards:
    """Owns shard 0 of region "local" with :data:`TOKEN`."""

    region_token = TOKEN

    def tokens(self) -> dict[int, int]:
        return {0: TOKEN}

    def trusted(self) -> bool:
        return True


class Relay:
    """Records deliveries instead of sending them to streams."""

    backlog = False

    def __init__(self) -> None:
        self.delivered: list = []

    def deliver(self, claimed) -> None:
        self.delivered += claimed


def loop_with(engine, evil_streams: int) -> tuple[ClaimLoop, Relay]:
    """A claim loop whose registry holds one acme stream (queue "honest") and ``evil_streams``
    evil streams of 100 queues each, all with credits."""
    registry = SessionRegistry()
    registry.add("acme", "acme", ["honest"], 100)
    for i in range(evil_streams):
        registry.add(f"evil-{i}", "evil", [f"q{i:02d}-{j:03d}" for j in range(100)], 100)
    relay = Relay()
    loop = ClaimLoop(
        engine,
        Shards(),  # type: ignore[arg-type]
        registry,
        relay,  # type: ignore[arg-type]
        DispatcherSettings(claim_targets=K),
        region="local",
        dispatcher_id="D",
        budget=RetryBudget(RetryBudgetSettings(), region="local"),
        breakers=Breakers(engine, BreakerSettings(), region="local", targets=registry.targets),
    )
    return loop, relay


@pytest.fixture
async def owned(engine):
    await own_shards(engine, TOKEN)
    await run_transaction(
        engine,
        partial(
            regions.record_region_ownership, region="local", owner_region="local", owner="D", token=TOKEN
        ),
    )
    return engine


class Statements:
    """Counts the SQL statements run on ``engine`` while active."""

    def __init__(self, engine) -> None:
        self.n = 0
        self.engine = engine.sync_engine

    def _count(self, *_args) -> None:
        self.n += 1

    def __enter__(self) -> Statements:
        event.listen(self.engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *_exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self._count)


async def rounds(loop: ClaimLoop, n: int) -> tuple[int, float, list[bool]]:
    """Runs ``n`` claim rounds: (statements, seconds per round, which rounds ended a cycle)."""
    ends = []
    with Statements(loop.engine) as st:
        t0 = time.perf_counter()
        for _ in range(n):
            _, delay = await loop.claim_once()
            ends.append(delay != 0.0)
        per_round = (time.perf_counter() - t0) / n
    return st.n, per_round, ends


async def test_the_statements_of_a_round_do_not_grow_with_targets(owned):
    engine = owned
    for rl in ("honest", "q00-000", "q49-099"):  # limited queues take the token path too
        ns = "acme" if rl == "honest" else "evil"
        await run_transaction(
            engine,
            lambda c, ns=ns, q=rl: rate_limits.set_limit(
                c, region="local", namespace=ns, queue=q, rate=1000, burst=1000
            ),
        )
    small, _ = loop_with(engine, 1)  # 101 targets
    large, _ = loop_with(engine, 50)  # 5,001 targets
    for loop in (small, large):  # warm the caches (budget windows, limited-or-not) of a first cycle
        await rounds(loop, math.ceil(len(loop.registry.capacity()) / (K - 1)) + 1)
    few, few_s, _ = await rounds(small, 20)
    many, many_s, _ = await rounds(large, 20)
    print(
        f"per round: 101 targets {few / 20:.1f} statements {few_s * 1000:.1f} ms; "
        f"5,001 targets {many / 20:.1f} statements {many_s * 1000:.1f} ms"
    )
    # the same statements whatever the number of targets (a retry-budget or limit lookup happens
    # only when a cached answer is old, in both)
    assert many <= few + 20 * 2, (few, many)


async def test_every_namespace_is_in_every_round_and_a_cycle_visits_every_target(owned):
    engine = owned
    loop, relay = loop_with(engine, 50)
    targets = loop.registry.capacity()
    seen: set = set()
    chosen_rounds = []
    real_pick = loop.rotation.pick

    def pick(eligible, k):
        chosen, end = real_pick(eligible, k)
        chosen_rounds.append(chosen)
        return chosen, end

    loop.rotation.pick = pick
    cycle = math.ceil((len(targets) - 1) / (K - 1))  # acme takes one slot of every round
    _, _, ends = await rounds(loop, cycle)
    for chosen in chosen_rounds:
        assert len(chosen) == K and ("acme", "honest") in chosen
        seen.update(chosen)
    assert seen == set(targets)
    assert ends[-1] and not any(ends[:-1])

    # acme's due job is claimed by the next round, whatever evil's targets
    await run_transaction(
        engine, lambda c: jobs_store.insert_job(c, new_job_spec(namespace="acme", queue="honest"))
    )
    n, _ = await loop.claim_once()
    assert n == 1 and relay.delivered[0].namespace == "acme"
