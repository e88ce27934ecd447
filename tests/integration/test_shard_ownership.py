"""Shard ownership through real etcd leases: a dispatcher that cannot renew its lease stops
claiming before the lease could expire, and comes back with larger fencing tokens."""

from __future__ import annotations

import time

import pytest

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.devservers import EtcdCluster
from gnomon.dispatcher.shards import ShardOwnership
from gnomon_test_support import wait_until


@pytest.fixture
def own_etcd(tmp_path):
    cluster = EtcdCluster(1, str(tmp_path / "etcd")).start()
    yield cluster
    cluster.stop()


async def test_lost_lease_stops_claims_before_expiry_and_reacquires_with_larger_tokens(own_etcd, engine):
    ttl = 3
    etcd = EtcdClient(own_etcd.endpoints, timeout=1.0)
    own = ShardOwnership(
        etcd,
        engine,
        prefix="/t",
        region="local",
        shards=4,
        dispatcher_id="d1",
        address="127.0.0.1:1",
        ttl_s=ttl,
        scan_s=0.2,
    )
    try:
        await own.start()
        before = own.tokens()
        assert sorted(before) == [0, 1, 2, 3]
        own_etcd.pause_member(0)
        paused_at = time.monotonic()
        await wait_until(lambda: own.tokens() == {}, ttl + 2, "the dispatcher to stop trusting its lease")
        stopped_after = time.monotonic() - paused_at
        # it stopped claiming before the lease could have expired: the last renewal was at most
        # one renewal period (ttl/3) before the pause, so TTL - margin after it is < TTL from the pause
        assert stopped_after < ttl, stopped_after
        own_etcd.resume_member(0)
        await wait_until(lambda: len(own.tokens()) == 4, 20, "shards re-acquired")
        after = own.tokens()
        assert all(after[s] > before[s] for s in range(4)), (before, after)
    finally:
        own_etcd.resume_member(0)
        await own.stop()
        await etcd.close()
