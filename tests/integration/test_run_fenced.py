"""``run_fenced``: a unit of work commits only while its shard tokens, its region token and its etcd
lease all still hold; if any does not, the whole unit rolls back and nothing of it is written.

Real PostgreSQL (both dialects). The unit of work is the real claim (jobs SCHEDULED -> QUEUED and
their attempt rows) plus a re-publication of the outbox, each followed by a row of its own
(``region_owners`` of another region) to show that the work outside the claim rolls back too.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gnomon.common.errors import StaleFencingToken
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import outbox as outbox_store
from gnomon.common.storage import regions
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.fencing import Fence, Fenced, LeaseNotTrusted, run_fenced
from gnomon.common.storage.schema import attempts, jobs, region_owners
from gnomon_test_support import DIALECTS, new_job_spec, own_region, own_shards

TOKEN = 9
REGION_TOKEN = 4
Q = [("default", "q")]

dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)


@pytest.fixture
async def engine(engine):
    """Shards 0 and 1 of region ``local`` owned under :data:`TOKEN`, the region under
    :data:`REGION_TOKEN`, and three due jobs in each shard."""
    await own_shards(engine, TOKEN, shards=(0, 1))
    await own_region(engine, REGION_TOKEN)
    for shard in (0, 0, 0, 1, 1, 1):
        await run_transaction(engine, lambda c, s=shard: jobs_store.insert_job(c, new_job_spec(shard=s)))
    return engine


def fence(tokens=None, region_token=REGION_TOKEN, trusted=lambda: True) -> Fence:
    return Fence("local", tokens if tokens is not None else {0: TOKEN, 1: TOKEN}, region_token, trusted)


async def claim_and_mark(fx: Fenced):
    """The unit of work: claims every due job, then writes one row outside the claim."""
    got = await claim_store.claim_due(fx, targets=Q, limit=100, dispatcher_id="D")
    await regions.record_region_ownership(fx.conn, region="marker", owner_region="local", owner="D", token=1)
    return got


async def written(engine) -> tuple[dict[str, int], int, int]:
    """(jobs per state, attempt rows, marker rows)."""
    async with engine.connect() as c:
        states = dict((await c.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))).all())
        n_attempts = (await c.execute(select(func.count()).select_from(attempts))).scalar_one()
        markers = (
            await c.execute(
                select(func.count()).select_from(region_owners).where(region_owners.c.region == "marker")
            )
        ).scalar_one()
    return states, n_attempts, markers


NOTHING = ({"SCHEDULED": 6}, 0, 0)


async def test_the_current_fence_commits_the_whole_unit(engine):
    got = await run_fenced(engine, fence(), claim_and_mark)
    assert len(got) == 6 and {c.token for c in got} == {TOKEN}
    assert await written(engine) == ({"QUEUED": 6}, 6, 1)


@pytest.mark.parametrize("stale_shard", [0, 1])
async def test_a_stale_shard_token_rolls_the_unit_back(engine, stale_shard):
    await own_shards(engine, TOKEN + 1, shards=(stale_shard,), owner="B")  # a newer owner took it
    with pytest.raises(StaleFencingToken) as e:
        await run_fenced(engine, fence(), claim_and_mark)
    assert e.value.metadata["shards"] == str(stale_shard)
    assert await written(engine) == NOTHING


@pytest.mark.parametrize("recorded", [REGION_TOKEN + 1, None])
async def test_a_stale_region_token_rolls_the_unit_back(engine, recorded):
    """A fail-over (a larger region token recorded) or a region never recorded: the region fence
    refuses the unit before it writes anything."""
    if recorded is None:
        bad = Fence("elsewhere", {0: TOKEN, 1: TOKEN}, REGION_TOKEN, lambda: True)
    else:
        await own_region(engine, recorded, owner="B")
        bad = fence()
    with pytest.raises(StaleFencingToken) as e:
        await run_fenced(engine, bad, claim_and_mark)
    assert e.value.metadata["region"] == bad.region
    assert await written(engine) == NOTHING


async def test_a_lease_no_longer_trusted_at_the_commit_rolls_the_unit_back(engine):
    checks: list[bool] = []

    def trusted() -> bool:  # trusted when the claim began; the lease expires while it runs
        checks.append(False)
        return False

    with pytest.raises(LeaseNotTrusted):
        await run_fenced(engine, fence(trusted=trusted), claim_and_mark)
    assert checks == [False]  # asked once, after the work, before the commit
    assert await written(engine) == NOTHING


async def test_the_outbox_republication_is_fenced_too(engine):
    """Claimed attempts wait in the outbox; a re-publication under a stale token re-stamps nothing,
    one under an untrusted lease neither; under the current token it takes the current token."""
    await run_fenced(
        engine, fence(), lambda fx: claim_store.claim_due(fx, targets=Q, limit=100, dispatcher_id="D")
    )
    await own_shards(engine, TOKEN + 1, shards=(1,), owner="B")

    async def republish(fx: Fenced):
        return await outbox_store.pending_outbox(fx, exclude=set(), limit=100)

    async def tokens_of_attempts() -> list[int]:
        async with engine.connect() as c:
            return sorted((await c.execute(select(attempts.c.token))).scalars())

    with pytest.raises(StaleFencingToken):
        await run_fenced(engine, fence(), republish)
    with pytest.raises(LeaseNotTrusted):
        await run_fenced(engine, fence({1: TOKEN + 1}, trusted=lambda: False), republish)
    assert await tokens_of_attempts() == [TOKEN] * 6
    got = await run_fenced(engine, fence({1: TOKEN + 1}), republish)
    assert len(got) == 3 and {c.token for c in got} == {TOKEN + 1}
    assert await tokens_of_attempts() == [TOKEN] * 3 + [TOKEN + 1] * 3


async def test_a_unit_that_touched_no_shard_needs_no_trusted_lease(engine):
    """Nothing due: the claim writes no shard's rows, so there is no shard fence to check and no
    lease to trust; the region fence still runs first (a stale one still refuses)."""
    empty = {"SCHEDULED": 6}
    got = await run_fenced(
        engine,
        fence(trusted=lambda: False),
        lambda fx: claim_store.claim_due(fx, targets=[("default", "none")], limit=10, dispatcher_id="D"),
    )
    assert got == [] and (await written(engine))[0] == empty
    await own_region(engine, REGION_TOKEN + 1, owner="B")
    with pytest.raises(StaleFencingToken):
        await run_fenced(
            engine, fence(), lambda fx: claim_store.claim_due(fx, targets=Q, limit=1, dispatcher_id="D")
        )


async def test_touching_a_shard_not_held_is_refused(engine):
    with pytest.raises(KeyError):
        await run_fenced(engine, fence({0: TOKEN}), lambda fx: _touch(fx, 1))


async def _touch(fx: Fenced, shard: int) -> None:
    fx.touch([shard])


async def test_the_outbox_republication_checks_the_region_fence(engine):
    """After a fail-over (a larger region token recorded), the old region token re-stamps nothing."""
    await run_fenced(
        engine, fence(), lambda fx: claim_store.claim_due(fx, targets=Q, limit=100, dispatcher_id="D")
    )
    await own_region(engine, REGION_TOKEN + 1, owner="B")

    async def outbox_rows() -> list[tuple]:
        async with engine.connect() as c:
            q = select(attempts.c.job_id, attempts.c.token, attempts.c.lease_expires_at).order_by(
                attempts.c.job_id
            )
            return [tuple(r) for r in await c.execute(q)]

    before = await outbox_rows()
    with pytest.raises(StaleFencingToken) as e:
        await run_fenced(
            engine, fence(), lambda fx: outbox_store.pending_outbox(fx, exclude=set(), limit=100)
        )
    assert e.value.metadata["region"] == "local"
    assert len(before) == 6 and await outbox_rows() == before  # nothing re-stamped, no lease restarted
