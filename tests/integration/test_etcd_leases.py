"""gnomon.common.coordination.etcd leases against a real etcd server: expiry without keepalive,
keepalive and revoke, and the LeaseKeeper (keeping a key alive, noticing a lost lease, riding out a
short pause of etcd, giving up on a long one).

The server is the module-scoped ``etcd_server`` fixture of tests/conftest.py (its own process, which
these tests pause with SIGSTOP); every test works under its own random key prefix (``prefix``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import pytest

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.common.coordination.lease_keeper import LeaseKeeper
from gnomon_test_support import EtcdServer, wait_until

pytestmark = pytest.mark.integration


# -- leases -------------------------------------------------------------------------------------


async def test_lease_expiry_without_keepalive_removes_key(client: EtcdClient, prefix: bytes) -> None:
    key = prefix + b"ephemeral"
    lease = await client.lease_grant(1)
    acquired, kv = await client.create_if_absent(key, b"v", lease)
    assert acquired and kv.lease == lease
    t0 = time.monotonic()
    await wait_until(
        lambda: _is_absent(client, key), 6.0, "the key to expire with its lease", interval_s=0.05
    )
    assert time.monotonic() - t0 >= 0.5  # it did not vanish at once
    assert await client.lease_keepalive(lease) == 0  # lease gone
    await client.lease_revoke(lease)  # unknown lease: not an error


async def _is_absent(client: EtcdClient, key: bytes) -> bool:
    return await client.get(key) is None


async def test_lease_keepalive_and_revoke(client: EtcdClient, prefix: bytes) -> None:
    key = prefix + b"k"
    lease = await client.lease_grant(7)
    await client.put(key, b"v", lease)
    assert await client.lease_keepalive(lease) == 7
    assert await client.lease_keepalive(lease) == 7  # the cached stream is reused
    await client.lease_revoke(lease)
    assert await client.get(key) is None
    assert await client.lease_keepalive(lease) == 0
    await client.lease_revoke(lease)  # NOT_FOUND is swallowed
    await client.lease_revoke(0x7EADBEEF)


async def test_lease_keeper_keeps_ttl2_key_alive(client: EtcdClient, prefix: bytes) -> None:
    key = prefix + b"kept"
    keeper = LeaseKeeper(client, ttl_s=2)
    assert keeper.safety_margin_s == 1.0
    with pytest.raises(RuntimeError):
        keeper.lease_id  # noqa: B018
    lease = await keeper.start()
    assert keeper.lease_id == lease and keeper.granted_ttl_s == 2
    assert keeper.valid() and 0.5 < keeper.remaining() <= 1.0
    acquired, kv = await client.create_if_absent(key, b"v", lease)
    assert acquired
    try:
        end = time.monotonic() + 5.0  # 2.5 TTLs: would have expired twice without renewal
        while time.monotonic() < end:
            assert keeper.valid(), keeper.remaining()
            assert not keeper.lost.is_set()
            assert await client.get(key) == kv
            await asyncio.sleep(0.25)  # samples of an observation window (the behaviour: 5 s of renewals)
    finally:
        await keeper.stop(revoke=True)
    assert keeper.lost.is_set() and not keeper.valid() and keeper.remaining() <= 0
    assert await client.get(key) is None  # revoked, not merely expiring
    await keeper.stop()  # idempotent


async def test_lease_keeper_sees_lease_gone(client: EtcdClient, prefix: bytes) -> None:
    keeper = LeaseKeeper(client, ttl_s=3, safety_margin_s=0.5)
    lease = await keeper.start()
    await client.lease_revoke(lease)  # someone else kills it; next keepalive gets TTL 0
    async with asyncio.timeout(3.0):
        await keeper.lost.wait()
    assert not keeper.valid() and keeper.remaining() <= 0
    await keeper.stop()


def test_lease_keeper_rejects_bad_margins() -> None:
    c = EtcdClient(["127.0.0.1:1"])
    with pytest.raises(ValueError):
        LeaseKeeper(c, ttl_s=1)  # default margin 1.0 leaves nothing
    with pytest.raises(ValueError):
        LeaseKeeper(c, ttl_s=5, safety_margin_s=5)
    assert LeaseKeeper(c, ttl_s=12).safety_margin_s == 4.0


async def test_lease_keeper_invalid_and_lost_when_etcd_paused(etcd_server: EtcdServer, prefix: bytes) -> None:
    async with EtcdClient([etcd_server.endpoint], timeout=0.5) as c:
        keeper = LeaseKeeper(c, ttl_s=2)  # margin 1.0: trusted for <= 1 s after the last sent keepalive
        lease = await keeper.start()
        await c.put(prefix + b"k", b"v", lease)
        ka_lease = await c.lease_grant(30)
        assert await c.lease_keepalive(ka_lease) == 30  # opens the cached keepalive stream

        # at least one background renewal succeeds, so the deadline comes from a keepalive
        first_deadline = time.monotonic() + keeper.remaining()
        await wait_until(
            lambda: time.monotonic() + keeper.remaining() > first_deadline + 0.01, 3.0, "a background renewal"
        )
        assert keeper.valid()

        os.kill(etcd_server.proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            async with asyncio.timeout(4.0):
                await keeper.lost.wait()
            lost_after = time.monotonic() - stopped_at
            assert not keeper.valid() and keeper.remaining() <= 0
            # the holder stops trusting before etcd could possibly expire the lease (TTL 2 from a
            # keepalive sent before the pause) and no later than TTL - margin (+ scheduling slack)
            assert lost_after < 2.0 - 0.5, lost_after
            assert lost_after <= 1.0 + 0.3, lost_after

            # a keepalive round trip to a paused server fails with EtcdError and drops the stream
            t0 = time.monotonic()
            with pytest.raises(EtcdError) as ei:
                await c.lease_keepalive(ka_lease)
            assert ei.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - t0 < 1.5
            with pytest.raises(EtcdError):
                await c.get(prefix + b"k")
        finally:
            os.kill(etcd_server.proc.pid, signal.SIGCONT)
        await asyncio.to_thread(etcd_server.wait_healthy, 10.0)

        # the client recovers on its own: a new keepalive stream, fresh reads
        async def keepalive_ok() -> bool:
            try:
                return await c.lease_keepalive(ka_lease) > 0
            except EtcdError:
                return False

        await wait_until(keepalive_ok, 5.0, "a keepalive to succeed again", interval_s=0.1)
        # ...but the keeper does not: lost is never cleared
        await asyncio.sleep(0.3)  # an observation window: a keeper that wrongly recovered would do so in it
        assert keeper.lost.is_set() and not keeper.valid()
        await keeper.stop(revoke=True)
        await c.lease_revoke(ka_lease)
        assert await c.get(prefix + b"k") is None


async def test_lease_keeper_rides_out_short_pause(etcd_server: EtcdServer, prefix: bytes) -> None:
    """A pause shorter than the trust window: renewals fail, are retried on new streams, then succeed."""
    async with EtcdClient([etcd_server.endpoint], timeout=0.5) as c:
        keeper = LeaseKeeper(c, ttl_s=4, safety_margin_s=1.0)  # window 3 s, renew every 1.33 s
        lease = await keeper.start()
        await c.put(prefix + b"k", b"v", lease)
        os.kill(etcd_server.proc.pid, signal.SIGSTOP)
        min_remaining = keeper.remaining()
        try:
            end = time.monotonic() + 1.6  # longer than a renew interval: at least one renewal fails
            while time.monotonic() < end:
                assert keeper.valid() and not keeper.lost.is_set(), keeper.remaining()
                min_remaining = min(min_remaining, keeper.remaining())
                await asyncio.sleep(0.05)  # samples of the paused window (the behaviour under test)
        finally:
            os.kill(etcd_server.proc.pid, signal.SIGCONT)
        assert min_remaining < 1.5, min_remaining  # renewal really was blocked

        async def renewed() -> bool:
            assert keeper.valid() and not keeper.lost.is_set(), keeper.remaining()
            return keeper.remaining() > 2.5

        await wait_until(renewed, 3.0, "a renewal after the pause", interval_s=0.05)
        kv = await c.get(prefix + b"k")
        assert kv is not None and kv.lease == lease
        await keeper.stop()
        assert await c.get(prefix + b"k") is None
