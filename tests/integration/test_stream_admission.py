"""Admission of worker streams against a real secure suite (api, dispatcher, planner, reaper
processes, PostgreSQL, etcd): every namespace gets default stream quotas (none of these namespaces
sets any), a namespace may override them through the admin API, and the dispatcher-wide stream cap
is shared fairly by namespace once it is nearly used, while an honest tenant's jobs keep running
on time.

The suite's cap is small (``GNOMON_DISPATCHER_MAX_STREAMS`` = 100, fair share from 80 streams) so the
fair share is reached with a few dozen streams; the stream quotas are the shipped defaults
(:class:`gnomon.common.stream_quota_settings.StreamQuotaSettings`)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.sdk import Client, NamespaceQuotas
from gnomon_isolation_support import honest_tenant
from gnomon_test_support import RawStream, decode, running_suite

CAP = 100
DEFAULTS = StreamQuotaSettings.model_construct()  # what the suite runs with (no override in env)


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("admission"),
        env={"GNOMON_DISPATCHER_MAX_STREAMS": str(CAP), "GNOMON_STREAM_QUOTA_FAIR_SHARE_FROM": "0.8"},
    ) as s:
        yield s


def worker_key(suite, namespace: str, name: str | None = None) -> str:
    """A new principal with a worker grant on every queue of ``namespace``; returns its API key."""
    name = name or f"w-{namespace}-{uuid.uuid4().hex[:6]}"
    with Client(api=suite.api_address) as admin:
        admin.create_principal(name)
        admin.grant_role(name, "worker", namespace, [])
        return admin.create_api_key(name).token


def rss_mib(suite) -> float:
    """The (first) dispatcher process's resident set size, MiB (/proc/<pid>/status VmRSS)."""
    disp = next(p for p in suite.procs if p.role == "dispatcher")
    for line in Path(f"/proc/{disp.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_stream(suite, key: str, namespace: str, queues: list[str], open_streams: list[RawStream]):
    """Opens a stream with ``key`` and a hello for ``queues``; returns None when welcomed (the stream
    is kept in ``open_streams``) or ``(code, reason, metadata)`` of the refusal."""
    s = RawStream(suite, key)
    s.send(hello=wpb.WorkerHello(worker_id="w", namespace=namespace, queues=queues, credits=10))
    try:
        s.next("welcome")
    except grpc.RpcError as e:
        _, info, _ = decode(e)
        s.close()
        return e.code(), info.reason if info else "", dict(info.metadata) if info else {}
    open_streams.append(s)
    return None


def until_refused(suite, key, namespace, queues_of, open_streams, most: int):
    """Opens streams (hello ``queues_of(i)``) until one is refused; returns ``(admitted, refusal)``."""
    for i in range(most):
        refused = open_stream(suite, key, namespace, queues_of(i), open_streams)
        if refused is not None:
            return i, refused
    raise AssertionError(f"{most} streams admitted, none refused")


def test_default_quotas_refuse_a_stream_flood_and_queue_flood_while_the_honest_tenant_runs(suite):
    streams: list[RawStream] = []
    before = rss_mib(suite)
    try:
        with honest_tenant(suite, namespace="acme", queue="honest") as acme:
            # many queue names: more than a hello may name, then new names in every hello
            names = iter(f"q{i}" for i in range(10_000))
            per_hello = DEFAULTS.max_queues_per_hello
            many = lambda _i: [next(names) for _ in range(per_hello)]  # noqa: E731
            flooder = worker_key(suite, "evil")
            refused = open_stream(suite, flooder, "evil", [f"x{i}" for i in range(100)], streams)
            assert refused is not None and (refused[0], refused[1], refused[2]["quota"]) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "QUOTA_EXCEEDED",
                "max_queues_per_hello",
            )
            n, refused = until_refused(suite, flooder, "evil", many, streams, most=5)
            assert (n, refused[1], refused[2]["quota"], refused[2]["limit"]) == (
                DEFAULTS.max_queues_per_principal // per_hello,
                "QUOTA_EXCEEDED",
                "max_queues_per_principal",
                str(DEFAULTS.max_queues_per_principal),
            )
            # another principal of the same namespace: the namespace's distinct queues are bounded too
            refused = open_stream(suite, worker_key(suite, "evil"), "evil", many(0), streams)
            assert refused is not None and (refused[1], refused[2]["quota"], refused[2]["limit"]) == (
                "QUOTA_EXCEEDED",
                "max_streamed_queues",
                str(DEFAULTS.max_streamed_queues),
            )
            # many streams on one queue: refused at the per-principal default
            opener = worker_key(suite, "evil")
            n, refused = until_refused(suite, opener, "evil", lambda _i: ["q0"], streams, most=200)
            assert (n, refused[1], refused[2]["quota"]) == (
                DEFAULTS.max_worker_streams_per_principal,
                "QUOTA_EXCEEDED",
                "max_worker_streams_per_principal",
            )
            print(
                f"evil holds {len(streams)} streams; dispatcher RSS {before:.0f} -> {rss_mib(suite):.0f} MiB"
            )
            time.sleep(3)  # the honest tenant keeps creating beside the held streams
    finally:
        for s in streams:
            s.close()
    print(acme.report)
    print(f"dispatcher RSS before {before:.0f} MiB, after {rss_mib(suite):.0f} MiB")
    acme.report.assert_within(p99_s=1.0)


def test_a_namespace_override_replaces_the_default(suite):
    with Client(api=suite.api_address) as admin:
        admin.create_namespace("small", quotas=NamespaceQuotas(max_worker_streams=2))
    streams: list[RawStream] = []
    try:
        n, refused = until_refused(suite, worker_key(suite, "small"), "small", lambda _i: ["q"], streams, 10)
    finally:
        for s in streams:
            s.close()
    assert (n, refused[2]["quota"], refused[2]["limit"]) == (2, "max_worker_streams", "2")


def test_one_namespace_cannot_take_the_dispatcher_cap(suite):
    streams: list[RawStream] = []
    try:
        with honest_tenant(suite, namespace="acme2", queue="honest") as acme:
            # evil opens streams with several principals (each under its own quota) until refused
            total = 0
            while True:
                n, refused = until_refused(
                    suite, worker_key(suite, "hog"), "hog", lambda _i: ["q"], streams, most=200
                )
                total += n
                if (
                    refused[1] != "QUOTA_EXCEEDED"
                    or refused[2]["quota"] != "max_worker_streams_per_principal"
                ):
                    break
            assert (refused[0], refused[1], refused[2]["quota"]) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "STREAM_FAIR_SHARE",
                "dispatcher_fair_share",
            ), refused
            assert int(refused[2]["streams"]) == total and total < CAP
            # a namespace not connected yet still gets its first streams, and so does acme2's second
            assert open_stream(suite, worker_key(suite, "newco"), "newco", ["q"], streams) is None
            acme2 = worker_key(suite, "acme2")
            assert open_stream(suite, acme2, "acme2", ["honest-extra"], streams) is None
            time.sleep(2)
    finally:
        for s in streams:
            s.close()
    print(f"hog held {total} of {CAP} streams when refused; {acme.report}")
    acme.report.assert_within(p99_s=1.0)
