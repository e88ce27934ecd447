"""The claim loop isolates queues (gnomon.dispatcher.claims): against the real database, a claim that
fails for one (namespace, queue) -- here a statement PostgreSQL refuses, run inside that queue's claim
-- does not stop claims for the other queues of the same transaction; the failing queue alone is
backed off, then claimed normally once it recovers. A lost database still fails the whole claim.
"""

from __future__ import annotations

from functools import partial

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from gnomon.common.config import BreakerSettings, DispatcherSettings, RetryBudgetSettings
from gnomon.common.errors import Unavailable
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import regions
from gnomon.common.storage.engine import run_transaction
from gnomon.devservers import free_port
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.claims import TARGET_BACKOFF_MIN_S, ClaimLoop, TargetBackoff
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon_test_support import new_job_spec, own_shards

pytestmark = pytest.mark.asyncio
TOKEN = 5
BAD = ("default", "bad")


class Shards:
    """Owns shard 0 of region "local" with :data:`TOKEN` (what ShardOwnership reports)."""

    region_token = TOKEN

    def __init__(self) -> None:
        self.trust_checks = 0
        self.trusted_for = 10**9  # how many trust checks answer True (then the lease is "lost")

    def tokens(self) -> dict[int, int]:
        return {0: TOKEN}

    def trusted(self) -> bool:
        self.trust_checks += 1
        return self.trust_checks <= self.trusted_for

    def region_stale(self) -> None:
        raise AssertionError("the region fence must hold")

    def drop(self, shards) -> None:
        raise AssertionError(f"shards {shards} must stay owned")


class Relay:
    """Records deliveries instead of sending them to streams."""

    backlog = False  # no QUEUED attempts waiting in the outbox

    def __init__(self) -> None:
        self.delivered: list = []

    def deliver(self, claimed) -> None:
        self.delivered += claimed


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def loop_on(engine, relay: Relay, shards: Shards | None = None) -> ClaimLoop:
    registry = SessionRegistry()
    registry.add("w", "default", ["good", "bad", "other"], 100)
    loop = ClaimLoop(
        engine,
        shards or Shards(),  # type: ignore[arg-type]
        registry,
        relay,  # type: ignore[arg-type]
        DispatcherSettings(),
        region="local",
        dispatcher_id="D",
        budget=RetryBudget(RetryBudgetSettings(), region="local"),
        breakers=Breakers(engine, BreakerSettings(), region="local", targets=registry.targets),
    )
    loop.backoff = TargetBackoff(clock=Clock())
    return loop


@pytest.fixture
async def setup(engine):
    await own_shards(engine, TOKEN)
    await run_transaction(
        engine,
        partial(
            regions.record_region_ownership, region="local", owner_region="local", owner="D", token=TOKEN
        ),
    )
    for queue in ("good", "bad", "other"):
        for _ in range(3):
            await run_transaction(engine, lambda c, q=queue: jobs_store.insert_job(c, new_job_spec(queue=q)))
    return engine


async def test_a_failing_queue_does_not_stop_claims_for_the_others(setup, monkeypatch):
    engine = setup
    real = claim_store.claim_targets
    poisoned = {"on": True}

    async def claim_targets(fx, **kw):
        if poisoned["on"] and BAD in [(w.namespace, w.queue) for w in kw["wants"]]:
            await fx.conn.execute(text("SELECT 1 / 0"))  # division_by_zero (22012): aborts the transaction
        return await real(fx, **kw)

    monkeypatch.setattr(claim_store, "claim_targets", claim_targets)
    relay = Relay()
    loop = loop_on(engine, relay)

    n, _ = await loop.claim_once()
    assert n == 6
    assert sorted({c.queue for c in relay.delivered}) == ["good", "other"]
    assert loop.backoff.blocked(BAD)

    # backed off: the next claims skip the bad queue (nothing more is due for the others)
    assert (await loop.claim_once())[0] == 0

    # it recovers after its back-off: claimed normally, back-off cleared
    poisoned["on"] = False
    clock = loop.backoff.clock
    assert isinstance(clock, Clock)
    clock.now += TARGET_BACKOFF_MIN_S + 0.001
    assert (await loop.claim_once())[0] == 3
    assert sorted(c.queue for c in relay.delivered).count("bad") == 3
    assert not loop.backoff.blocked(BAD)


async def test_backoff_doubles_per_failure_up_to_the_cap():
    clock = Clock()
    b = TargetBackoff(clock=clock)
    assert [b.failed(BAD) for _ in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert b.blocked(BAD) and not b.blocked(("default", "good"))
    assert b.next_retry_in() == 60.0
    clock.now += 60.0
    assert not b.blocked(BAD)
    b.succeeded(BAD)
    assert b.next_retry_in() is None and b.failed(BAD) == 1.0


async def test_a_lost_database_still_fails_the_whole_claim(setup):
    gone = create_async_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none", connect_args={"connect_timeout": 2}
    )
    try:
        loop = loop_on(gone, Relay())
        with pytest.raises(Unavailable):
            await loop.claim_once()
        assert not loop.backoff.blocked(BAD) and loop.backoff.next_retry_in() is None
    finally:
        await gone.dispose()


async def test_a_claim_that_outlives_the_lease_trust_commits_nothing(setup):
    """tokens() was read under a trusted lease, but the lease stopped being trusted before the claim
    could commit (etcd quorum lost while the transaction ran): the claim is rolled back, nothing is
    delivered and the jobs stay SCHEDULED for whoever owns the shard next."""
    engine = setup
    relay, shards = Relay(), Shards()
    shards.trusted_for = 0
    loop = loop_on(engine, relay, shards)
    assert await loop.claim_once() == (0, None)
    assert relay.delivered == [] and shards.trust_checks == 1
    async with engine.connect() as c:
        states = (await c.execute(text("SELECT state, count(*) FROM jobs GROUP BY state"))).all()
    assert dict(states) == {"SCHEDULED": 9}
    shards.trusted_for = 10**9  # trusted again: the same jobs are claimed
    assert (await loop.claim_once())[0] == 9


class BackloggedRelay(Relay):
    """A relay whose recovery scan has unpublished rows waiting (released or expired attempts)."""

    def __init__(self, waiting: int) -> None:
        super().__init__()
        self.waiting = waiting
        self.backlog = True

    async def recover_once(self) -> int:
        self.backlog = False
        n, self.waiting = self.waiting, 0
        return n


async def test_the_outbox_backlog_is_served_before_new_claims(setup):
    """Attempts waiting in the outbox (claimed earlier) go out before anything new is claimed."""
    relay = BackloggedRelay(waiting=2)
    loop = loop_on(setup, relay)
    assert await loop.claim_once() == (2, 0.0)  # the backlog only: nothing claimed
    assert relay.delivered == [] and loop.claimed_total == 0
    n, _ = await loop.claim_once()  # backlog empty: claims resume
    assert n == 9 and loop.claimed_total == 9


class LosingShards(Shards):
    """Reports ``token`` for shard 0 (by default :data:`TOKEN`, which may have gone stale) and
    records the shards the claim loop drops."""

    def __init__(self, token: int = TOKEN) -> None:
        super().__init__()
        self.token = token
        self.dropped: list[int] = []

    def tokens(self) -> dict[int, int]:
        return {0: self.token}

    def drop(self, shards) -> None:
        self.dropped += shards


@pytest.fixture
def fence_checks(monkeypatch) -> list[dict[int, int]]:
    """The ``tokens`` of every fence check the claim loop runs (through ``run_fenced``), in order
    (the real check runs)."""
    from gnomon.common.storage import fencing

    checks: list[dict[int, int]] = []
    real = fencing.check_fence

    async def counted(conn, region, tokens, **kw):
        checks.append(dict(tokens))
        return await real(conn, region, tokens, **kw)

    monkeypatch.setattr(fencing, "check_fence", counted)
    return checks


async def assert_nothing_claimed(engine) -> None:
    """All 9 jobs of :func:`setup` still SCHEDULED and no attempt row written."""
    async with engine.connect() as c:
        states = (await c.execute(text("SELECT state, count(*) FROM jobs GROUP BY state"))).all()
        attempts = (await c.execute(text("SELECT count(*) FROM attempts"))).scalar_one()
    assert dict(states) == {"SCHEDULED": 9} and attempts == 0


async def test_one_fence_check_covers_every_queue_of_a_claim(setup, fence_checks):
    """The claim takes jobs of three queues in one transaction and checks the fence of the shards
    it claimed from once, after the last queue; a token gone stale rolls back every queue's claim."""
    from gnomon.common.errors import StaleFencingToken

    engine, checks = setup, fence_checks
    await own_shards(engine, TOKEN + 1)  # another dispatcher took shard 0: TOKEN is stale now
    relay, shards = Relay(), LosingShards()
    with pytest.raises(StaleFencingToken):
        await loop_on(engine, relay, shards).claim_once()
    assert checks == [{0: TOKEN}] and shards.dropped == [0] and relay.delivered == []
    await assert_nothing_claimed(engine)

    # with the current token: one claim of all three queues, one fence check, 9 jobs
    checks.clear()
    n, _ = await loop_on(engine, relay, LosingShards(TOKEN + 1)).claim_once()
    assert n == 9 and checks == [{0: TOKEN + 1}]
    assert sorted({c.queue for c in relay.delivered}) == ["bad", "good", "other"]


async def test_a_stale_token_rolls_back_the_isolated_claim_too(setup, monkeypatch, fence_checks):
    """One queue fails (the claim retries with a savepoint per queue) and the shard's token has gone
    stale: the one fence check after the savepoints refuses the whole claim, the queues that
    succeeded inside their savepoints included."""
    from gnomon.common.errors import StaleFencingToken

    engine, checks = setup, fence_checks
    real = claim_store.claim_targets

    async def claim_targets(fx, **kw):
        if BAD in [(w.namespace, w.queue) for w in kw["wants"]]:
            await fx.conn.execute(text("SELECT 1 / 0"))
        return await real(fx, **kw)

    monkeypatch.setattr(claim_store, "claim_targets", claim_targets)
    await own_shards(engine, TOKEN + 1)
    relay, shards = Relay(), LosingShards()
    with pytest.raises(StaleFencingToken):
        await loop_on(engine, relay, shards).claim_once()
    assert checks == [{0: TOKEN}]  # the isolated claim's: the fast one failed before its check
    assert relay.delivered == [] and shards.dropped == [0]
    await assert_nothing_claimed(engine)
