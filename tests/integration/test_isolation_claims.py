"""Tenant isolation of the claim round and the rate limits: no tenant can slow another's claims or lift its
limits, against a real secure suite (api, dispatcher, planner, reaper processes; PostgreSQL; etcd).

* A tenant ("evil") holding 5,000 (namespace, queue) targets with credits (50 worker streams of
  100 queues each) does not slow the claims of another tenant ("acme"): the claim round takes a
  bounded number of targets, fair across namespaces (``GNOMON_DISPATCHER_CLAIM_TARGETS``), where it
  used to run one claim query per target.
* A tenant with rate limits on 25,000 of its queues (inside its quota) does not lift another's
  limit: the dispatcher looks limits up by the queues it claims, where it read the first 10,000
  rows of the table in no order.
* The quota on queues with a limit per namespace (``GNOMON_MAX_QUEUE_LIMITS``) refuses one more
  with RESOURCE_EXHAUSTED (QUOTA_EXCEEDED), and only in the namespace past it.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from gnomon._proto.gnomon.v1 import queue_service_pb2 as qpb
from gnomon._proto.gnomon.v1 import queue_service_pb2_grpc as qgrpc
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.sdk import Client, GnomonError
from gnomon.sdk.connection import resolve
from gnomon_isolation_support import TESTS_DIR, honest_tenant
from gnomon_test_support import RawStream, decode, running_suite, sql, wait_for

#: The quota on queues with a rate limit per namespace, set for this suite: evil floods up to it.
QUOTA = 25_000
#: The attacking tenant's namespace ("evil" below). It sorts before "acme", so acme's limit comes
#: after the flood in both the table's key order and its insertion order.
ATTACKER = "abuse"
#: evil's worker streams and queues per stream: 5,000 (namespace, queue) targets.
STREAMS, QUEUES = 50, 100


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("iso-claims"),
        env={
            "GNOMON_MAX_QUEUE_LIMITS": str(QUOTA),
            "GNOMON_AUTH_CACHE_S": "0.2",
            # the stream quotas raised, so that the attacker reaches 5,000 claim targets (50 streams
            # of 100 queues): this test is about the claim round, not the quotas that would refuse it
            "GNOMON_STREAM_QUOTA_MAX_QUEUES_PER_HELLO": "100",
            "GNOMON_STREAM_QUOTA_MAX_QUEUES_PER_PRINCIPAL": "10000",
            "GNOMON_STREAM_QUOTA_MAX_STREAMED_QUEUES": "10000",
        },
    ) as s:
        yield s


def principal(suite, name: str, *grants: tuple[str, str]) -> str:
    """Creates principal ``name`` with ``grants`` (role, namespace; every queue) as the suite's
    admin; returns a fresh API key of it."""
    with Client(api=suite.api_address) as admin:
        admin.create_principal(name)
        for role, ns in grants:
            admin.grant_role(name, role, ns)
        return admin.create_api_key(name).token


@pytest.fixture(scope="module")
def evil_key(suite) -> str:
    return principal(suite, f"evil-{uuid.uuid4().hex[:6]}", ("worker", ATTACKER), ("operator", ATTACKER))


def test_five_thousand_targets_of_one_tenant_do_not_slow_another(suite, evil_key):
    with honest_tenant(suite, namespace="acme", queue="honest") as acme:
        time.sleep(8)  # the baseline: nobody else connected
    baseline = acme.report
    print("baseline", baseline)
    baseline.assert_within(p99_s=2.0)

    streams = []
    try:
        for i in range(STREAMS):
            s = RawStream(suite, evil_key)
            s.send(
                hello=wpb.WorkerHello(
                    worker_id=f"evil-{i}",
                    namespace=ATTACKER,
                    queues=[f"q{i:02d}-{j:03d}" for j in range(QUEUES)],
                    credits=100,
                )
            )
            s.next("welcome")
            streams.append(s)
        with honest_tenant(suite, namespace="acme", queue="honest") as acme:
            time.sleep(12)
        attacked = acme.report
        print(f"under {STREAMS * QUEUES} targets of evil:", attacked)
        # The bound every isolation test states (p99 <= 1 s), or twice the quiet baseline if that is
        # larger. A 0.5 s floor was flaky on a CI run whose other worker ran tests beside it (one
        # 0.8 s spike among 121 jobs); the claim rounds before the fix gave lags of many seconds.
        attacked.assert_within(p99_s=max(2 * baseline.p99_s, 1.0))
    finally:
        for s in streams:
            s.close()


def flood_limits(suite, key: str, namespace: str, queues: list[str]) -> list[grpc.RpcError]:
    """Sets a 1000/s limit on each of ``queues`` of ``namespace`` through SetQueueRateLimit (64
    calls in flight, as ``key``); returns the calls that failed."""
    channel = resolve(suite.api_address, api_key=key).channel()
    stub = qgrpc.QueueServiceStub(channel)
    errors: list[grpc.RpcError] = []

    def one(q: str) -> None:
        try:
            stub.SetQueueRateLimit(
                qpb.SetQueueRateLimitRequest(name=f"namespaces/{namespace}/queues/{q}", rate=1000), timeout=60
            )
        except grpc.RpcError as e:
            errors.append(e)

    try:
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(one, queues))
    finally:
        channel.close()
    return errors


#: Limits evil sets through the API; the rest of its flood, up to :data:`QUOTA`, is written by an
#: admin tooling step (each SetQueueRateLimit also reads the queue back: ~10,000 of them take
#: minutes on a loaded 2-core box).
THROUGH_API = 300


def fill_evil_to_quota(suite, evil_key) -> None:
    """evil's limits up to :data:`QUOTA`: all but :data:`THROUGH_API` inserted, then the rest through
    the API (so the API's connections, which acme's limit goes through next, write at the table's end)."""
    (count,) = sql(suite.database_url, "SELECT count(*) FROM queue_limits WHERE namespace = %s", ATTACKER)[0]
    if count >= QUOTA:
        return
    sql(
        suite.database_url,
        "INSERT INTO queue_limits (region, namespace, queue, rate, burst, tokens, refilled_at, updated_at) "
        "SELECT 'local', %s, 'flood-' || lpad(i::text, 5, '0'), 1000, 1000, 1000, now(), now() "
        "FROM generate_series(%s::int, %s::int) i ON CONFLICT DO NOTHING RETURNING 1",
        ATTACKER,
        THROUGH_API,
        QUOTA - 1,
    )
    t0 = time.monotonic()
    errors = flood_limits(suite, evil_key, ATTACKER, [f"flood-{i:05d}" for i in range(THROUGH_API)])
    assert not errors, [e.code() for e in errors[:3]]
    print(f"{THROUGH_API} limits set through the API in {time.monotonic() - t0:.1f} s")
    (count,) = sql(suite.database_url, "SELECT count(*) FROM queue_limits WHERE namespace = %s", ATTACKER)[0]
    assert count == QUOTA


def test_a_flood_of_limits_does_not_lift_another_tenants_limit(suite, evil_key):
    fill_evil_to_quota(suite, evil_key)

    record = os.path.join(suite.work_dir, "limited.txt")
    with Client(api=suite.api_address, namespace="acme") as acme:
        q = acme.set_queue_rate_limit("limited", 1, 1)  # set after the flood: last in the table
        assert q.rate_limit[:2] == (1.0, 1)
        for _ in range(30):
            acme.create_job("limited", b"")
        worker = suite.start_worker(
            ["limited"],
            "gnomon_test_handlers:record",
            concurrency=64,
            env={"GNOMON_NAMESPACE": "acme", "GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR},
        )
        try:
            first = wait_for(
                lambda: sql(
                    suite.database_url,
                    "SELECT min(dispatched_at) FROM jobs WHERE namespace = 'acme' AND queue = 'limited'",
                )[0][0],
                60,
                "acme's first limited dispatch",
            )
            time.sleep(11)
            (n,) = sql(
                suite.database_url,
                "SELECT count(*) FROM jobs WHERE namespace = 'acme' AND queue = 'limited' "
                "AND dispatched_at <= %s + interval '10 seconds'",
                first,
            )[0]
        finally:
            suite.stop_proc(worker)
    print(f"acme's 1/s burst 1 queue: {n} of 30 dispatched in the 10 s after its first")
    assert 2 <= n <= 11, f"{n} dispatches in 10 s under a 1/s burst 1 limit (at most 11 allowed)"


def test_the_quota_on_limits_refuses_one_more_in_that_namespace_only(suite, evil_key):
    fill_evil_to_quota(suite, evil_key)
    with Client(api=suite.api_address, namespace=ATTACKER, api_key=evil_key) as evil:
        with pytest.raises(GnomonError) as e:
            evil.set_queue_rate_limit("one-more", 5)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.value.reason == "QUOTA_EXCEEDED"
        # changing or removing an existing limit is not refused
        assert evil.set_queue_rate_limit("flood-00000", 7).rate_limit[:2] == (7.0, 7)
        assert evil.set_queue_rate_limit("flood-00001", 0).rate_limit is None
        assert evil.set_queue_rate_limit("one-more", 5).rate_limit[:2] == (5.0, 5)  # the freed slot
    # the refusal names the quota
    channel = resolve(suite.api_address, api_key=evil_key).channel()
    try:
        with pytest.raises(grpc.RpcError) as raw:
            qgrpc.QueueServiceStub(channel).SetQueueRateLimit(
                qpb.SetQueueRateLimitRequest(name=f"namespaces/{ATTACKER}/queues/two-more", rate=1),
                timeout=30,
            )
        status, info, _ = decode(raw.value)
        assert raw.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert info is not None and info.reason == "QUOTA_EXCEEDED"
        assert dict(info.metadata) == {
            "quota": "max_queue_limits",
            "limit": str(QUOTA),
            "namespace": ATTACKER,
        }
    finally:
        channel.close()
    # another namespace is not affected by evil's count
    with Client(api=suite.api_address, namespace="acme") as acme:
        assert acme.set_queue_rate_limit("other", 3).rate_limit[:2] == (3.0, 3)
    (n,) = sql(suite.database_url, "SELECT count(*) FROM queue_limits WHERE namespace = %s", ATTACKER)[0]
    assert n == QUOTA
