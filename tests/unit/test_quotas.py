"""Namespace quota logic without I/O: the create-rate token bucket, the hello check, the namespace
cache's time-to-live (all on a hand-driven clock), and the RESOURCE_EXHAUSTED status with RetryInfo."""

from __future__ import annotations

import math

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from gnomon.common.errors import QuotaExceeded
from gnomon.common.quotas import (
    STREAM_QUOTAS,
    UNLIMITED,
    NamespaceCache,
    Quota,
    Quotas,
    StreamUsage,
    TokenBucket,
    burst_of,
    check_hello_quota,
)
from gnomon.common.rpc.errors import to_status
from gnomon.common.stream_quota_settings import StreamQuotaSettings


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_bucket_starts_full_refills_at_rate_and_says_how_long_to_wait():
    clock = Clock()
    b = TokenBucket(2.0, burst_of(2.0), clock)
    assert [b.take(1), b.take(1)] == [0.0, 0.0]
    assert b.take(1) == pytest.approx(0.5)  # one token at 2/s
    assert b.tokens == pytest.approx(0.0)  # a refusal takes nothing
    clock.t += 0.5
    assert b.take(1) == 0.0
    clock.t += 100
    assert b.tokens <= b.burst and b.take(2) == 0.0 and b.take(1) == pytest.approx(0.5)


def test_bucket_refuses_for_ever_a_batch_larger_than_its_burst():
    b = TokenBucket(0.5, burst_of(0.5), Clock())
    assert b.burst == 1.0
    assert math.isinf(b.take(2))
    assert b.take(1) == 0.0


def _usage(streams=1, principal_streams=1, hello=1, principal_queues=1, namespace_queues=1) -> StreamUsage:
    return StreamUsage(streams, principal_streams, hello, principal_queues, namespace_queues)


def test_hello_check_names_the_quota():
    q = Quotas(max_worker_streams=2, max_queues_per_hello=1)
    check_hello_quota("ns", "p", q, _usage(streams=2))
    with pytest.raises(QuotaExceeded) as e:
        check_hello_quota("ns", "p", q, _usage(hello=2))
    assert e.value.metadata == {"quota": Quota.MAX_QUEUES_PER_HELLO, "limit": "1", "namespace": "ns"}
    with pytest.raises(QuotaExceeded) as e:
        check_hello_quota("ns", "p", q, _usage(streams=3))
    assert e.value.metadata["quota"] == Quota.MAX_WORKER_STREAMS and e.value.retry_after_s == 1.0
    check_hello_quota("ns", "p", UNLIMITED, _usage(10_000, 10_000, 100, 10_000, 10_000))


@pytest.mark.parametrize(
    ("quota", "usage", "principal_named"),
    [
        (Quota.MAX_WORKER_STREAMS_PER_PRINCIPAL, _usage(principal_streams=4), True),
        (Quota.MAX_QUEUES_PER_PRINCIPAL, _usage(principal_queues=4), True),
        (Quota.MAX_STREAMED_QUEUES, _usage(namespace_queues=4), False),
    ],
)
def test_hello_check_counts_per_principal_and_distinct_queues(quota, usage, principal_named):
    q = Quotas(**{quota: 3})
    check_hello_quota("ns", "p", q, _usage(3, 3, 1, 3, 3))
    with pytest.raises(QuotaExceeded) as e:
        check_hello_quota("ns", "p", q, usage)
    assert (e.value.metadata["quota"], e.value.metadata["limit"], e.value.reason) == (
        quota,
        "3",
        "QUOTA_EXCEEDED",
    )
    assert ("principal" in e.value.metadata) is principal_named


def test_stream_quotas_default_from_settings_unless_the_namespace_sets_them():
    d = StreamQuotaSettings.model_construct()
    got = Quotas(max_pending_jobs=7, max_worker_streams=5).with_defaults(d)
    assert got.max_pending_jobs == 7 and got.max_create_rate == 0.0  # job quotas untouched
    assert (got.max_worker_streams, got.max_worker_streams_per_principal, got.max_queues_per_hello) == (
        5,
        d.max_worker_streams_per_principal,
        d.max_queues_per_hello,
    )
    assert all(getattr(UNLIMITED.with_defaults(d), f) == getattr(d, f) for f in STREAM_QUOTAS)


async def test_namespace_cache_reloads_after_its_ttl_and_on_forget():
    clock, loads = Clock(), []

    async def load(ns: str) -> Quotas | None:
        loads.append(ns)
        return None if ns == "none" else Quotas(max_schedules=len(loads))

    cache = NamespaceCache(load, ttl_s=5.0, clock=clock)
    assert (await cache.quotas("a")).max_schedules == 1
    clock.t += 4.9
    assert (await cache.quotas("a")).max_schedules == 1
    clock.t += 0.2
    assert (await cache.quotas("a")).max_schedules == 2
    cache.forget("a")
    assert (await cache.quotas("a")).max_schedules == 3
    assert await cache.quotas("none") == UNLIMITED
    assert loads == ["a", "a", "a", "none"]


def test_quota_status_is_resource_exhausted_with_retry_info_in_milliseconds():
    err = QuotaExceeded("over", quota=Quota.MAX_CREATE_RATE, limit=2.5, namespace="ns", retry_after_s=1.2345)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = to_status(err)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(status.trailing_metadata)["grpc-status-details-bin"]
    rich = status_pb2.Status.FromString(details)
    infos = [d for d in rich.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    retry = error_details_pb2.RetryInfo()
    infos[0].Unpack(retry)
    assert (retry.retry_delay.seconds, retry.retry_delay.nanos) == (1, 235_000_000)
    info = error_details_pb2.ErrorInfo()
    next(d for d in rich.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)).Unpack(info)
    assert (info.reason, dict(info.metadata)) == (
        "QUOTA_EXCEEDED",
        {"quota": "max_create_rate", "limit": "2.5", "namespace": "ns"},
    )
