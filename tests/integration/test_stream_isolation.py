"""One worker stream cannot stall or bloat the dispatcher for other tenants (docs/security.md;
docs/protocol.md section 12), against a real secure suite (processes, PostgreSQL, etcd):

* a worker of namespace ``evil`` flooding accepts, heartbeats and results of attempts it was never
  given is refused at the edge (``STALE_ATTEMPT``, no database write), its stream is read no faster
  than its in-flight write budget allows, and acme's honest tenant keeps its bound;
* a stream that never reads its responses holds at most its queued-response byte cap: the
  dispatcher stops assigning to it, so large payloads do not pile up in the dispatcher's memory;
* a result with the right fencing token for an attempt the caller does not own is refused
  ``STALE_ATTEMPT`` even after the attempt finished (no oracle for its existence or state).

Each test prints its figures (honest lag, dispatcher RSS growth) for the record.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.sdk import Client
from gnomon.sdk.connection import resolve
from gnomon_isolation_support import honest_tenant
from gnomon_test_support import RawStream, running_suite, scrape, sql, wait_for

#: the per-stream byte cap of queued responses (GNOMON_STREAM_MAX_QUEUED_RESPONSE_BYTES's default), bytes
BYTE_CAP = 4 * 1024 * 1024
#: the payload of the never-reading stream's jobs, bytes (the API's maximum)
BIG = 256 * 1024


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("stream-isolation"),
        env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1"},
    ) as s:
        yield s


def dispatcher(suite):
    return next(p for p in suite.procs if p.role == "dispatcher")


def rss_mb(pid: int) -> float:
    """The resident set of process ``pid`` (``VmRSS`` of /proc/<pid>/status), MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counters(suite, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of counter ``name`` (without ``_total``) the dispatcher exports: labels -> value."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for fam in text_string_to_metric_families(scrape(dispatcher(suite).metrics_address)):
        if fam.name == name:
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(samples: dict, **labels: str) -> float:
    return sum(v for k, v in samples.items() if all((n, labels[n]) in k for n in labels))


def principal(suite, name: str, *grants: tuple[str, str, list[str]]) -> str:
    with Client(api=suite.api_address) as admin:
        admin.create_principal(name)
        for role, ns, queues in grants:
            admin.grant_role(name, role, ns, queues)
        return admin.create_api_key(name).token


def unknown_refs(n: int) -> list[wpb.AttemptRef]:
    """``n`` references of attempts nobody was given: random jobs of namespace evil."""
    return [
        wpb.AttemptRef(job=f"namespaces/evil/jobs/{uuid.uuid4()}", attempt=1, version=1, fencing_token=7)
        for _ in range(n)
    ]


def flood_messages() -> list[wpb.LeaseRequest]:
    msgs = []
    for i in range(30):
        refs = unknown_refs(1000)
        if i % 3 == 0:
            msgs.append(wpb.LeaseRequest(accepts=wpb.AttemptRefs(attempts=refs)))
        elif i % 3 == 1:
            msgs.append(wpb.LeaseRequest(heartbeats=wpb.Heartbeats(attempts=refs)))
        else:
            results = [wpb.AttemptResult(attempt=r, outcome=wpb.OUTCOME_SUCCEEDED) for r in refs]
            msgs.append(wpb.LeaseRequest(results=wpb.AttemptResults(results=results)))
    return msgs


def flood(suite, key: str, seconds: float, report: dict) -> None:
    """Runs a worker stream of ``key`` (namespace evil) that sends unknown-attempt accepts,
    heartbeats and results as fast as the dispatcher reads them for ``seconds``; counts in
    ``report``: ``sent`` items, ``acks`` by (ok, reason)."""
    msgs = flood_messages()
    stop_at = time.monotonic() + seconds
    acks: Counter = Counter()
    report["acks"] = acks

    def requests():
        yield wpb.LeaseRequest(
            hello=wpb.WorkerHello(worker_id="flood", namespace="evil", queues=["jobs"], credits=1)
        )
        i = 0
        while time.monotonic() < stop_at:
            yield msgs[i % len(msgs)]
            report["sent"] = report.get("sent", 0) + 1000
            i += 1

    channel = resolve(dispatcher(suite).address, api_key=key).channel()
    try:
        call = wgrpc.WorkerServiceStub(channel).Lease(requests(), timeout=seconds + 120)
        t0 = time.monotonic()
        for msg in call:
            report["last_ack_s"] = time.monotonic() - t0
            if msg.WhichOneof("kind") == "acks":
                for a in msg.acks.acks:
                    acks[(a.ok, a.reason)] += 1
            if time.monotonic() > stop_at + 60:
                break
    except grpc.RpcError as e:
        report["ended"] = e.code().name
    finally:
        channel.close()


def test_a_flood_of_unknown_attempts_is_refused_at_the_edge_and_acme_keeps_its_bound(suite):
    key = principal(suite, "w-flood", ("worker", "evil", ["jobs"]))
    pid = dispatcher(suite).popen.pid
    before = rss_mb(pid)
    report: dict = {}
    peak = before
    with honest_tenant(suite, namespace="acme") as acme:
        cpu0, t0 = cpu_s(pid), time.monotonic()
        t = threading.Thread(target=flood, args=(suite, key, 15.0, report), daemon=True)
        t.start()
        while t.is_alive():
            peak = max(peak, rss_mb(pid))
            t.join(0.5)
        cpu = (cpu_s(pid) - cpu0) / (time.monotonic() - t0)
    after = rss_mb(pid)
    acks = report.get("acks", Counter())
    refused = counters(suite, "gnomon_stream_refused_refs")
    written = counters(suite, "gnomon_stream_write_items")
    print(
        f"\nflood: {report.get('sent', 0)} unknown refs sent, acks {dict(acks)} within "
        f"{report.get('last_ack_s', 0):.1f} s, ended {report.get('ended')}; refused at the edge "
        f"{total(refused, namespace='evil'):.0f}, written {total(written, namespace='evil'):.0f}"
        f"\ndispatcher RSS {before:.0f} -> peak {peak:.0f} -> {after:.0f} MiB (+{peak - before:.0f}); "
        f"dispatcher CPU {cpu * 100:.0f} % of a core during the flood\n{acme.report}"
    )
    acme.report.assert_within(p99_s=1.0)
    assert acks[(False, "STALE_ATTEMPT")] >= 1000, "the flood was answered, item by item"
    assert not any(ok for ok, _ in acks), "no unknown attempt was acknowledged ok"
    # refused at the edge: counted there, and nothing of namespace evil reached the write batcher
    assert total(refused, namespace="evil") >= 1000
    assert total(written, namespace="evil") == 0
    assert total(written, namespace="acme") > 0  # the honest tenant's writes are counted there
    assert peak - before < 150, f"dispatcher RSS grew {peak - before:.0f} MiB"


def test_a_stream_that_never_reads_holds_at_most_its_byte_cap(suite):
    key = principal(suite, "w-deaf", ("worker", "evil", ["big"]), ("client", "evil", []))
    pid = dispatcher(suite).popen.pid
    deaf = RawStream(suite, key)  # sends its hello, then never reads a response
    deaf.send(hello=wpb.WorkerHello(worker_id="deaf", namespace="evil", queues=["big"], credits=10_000))
    n = 400  # 100 MiB of payloads
    before = rss_mb(pid)
    peak = before
    with honest_tenant(suite, namespace="acme-2") as acme:
        with Client(api=suite.api_address, namespace="evil", api_key=key, timeout=60) as evil:
            payload = b"x" * BIG
            for i in range(n):
                evil.create_job("big", payload)
                if i % 20 == 0:
                    peak = max(peak, rss_mb(pid))
        end = time.monotonic() + 5
        while time.monotonic() < end:
            peak = max(peak, rss_mb(pid))
            time.sleep(0.25)
    rows = sql(suite.database_url, "SELECT state, count(*) FROM jobs WHERE queue = 'big' GROUP BY state")
    states = {state: count for state, count in rows}
    print(
        f"\nnever-reading stream: {n} jobs of {BIG // 1024} KiB; job states {states}"
        f"\ndispatcher RSS {before:.0f} -> peak {peak:.0f} MiB (+{peak - before:.0f})\n{acme.report}"
    )
    acme.report.assert_within(p99_s=1.0)
    # at most the cap (plus one message) is queued for it: most jobs were never assigned to it
    assert states.get("SCHEDULED", 0) >= n - 2 * BYTE_CAP // BIG - 20, states
    assert peak - before < 80, f"dispatcher RSS grew {peak - before:.0f} MiB"
    deaf.close()


def test_a_result_for_a_finished_attempt_of_another_principal_is_refused(suite):
    owner_key = principal(suite, "w-owner", ("worker", "acme-3", ["jobs"]), ("client", "acme-3", []))
    thief_key = principal(suite, "w-nosy", ("worker", "acme-3", ["jobs"]), ("reader", "acme-3", []))
    with Client(api=suite.api_address, namespace="acme-3", api_key=owner_key) as c:
        job = c.create_job("jobs", payload=b"x")
    owner = RawStream(suite, owner_key)
    owner.send(hello=wpb.WorkerHello(worker_id="w1", namespace="acme-3", queues=["jobs"], credits=1))
    ref = None
    while ref is None:
        for a in owner.next("assignments").assignments.assignments:
            if a.attempt.job == job.name:
                ref = a.attempt
    owner.send(accepts=wpb.AttemptRefs(attempts=[ref]))
    assert owner.next("acks").acks.acks[0].ok
    done = wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)
    owner.send(results=wpb.AttemptResults(results=[done]))
    assert owner.next("acks").acks.acks[0].ok
    owner.close()
    with Client(api=suite.api_address, namespace="acme-3", api_key=thief_key) as reader:
        wait_for(lambda: reader.get_job(job.name).state == "SUCCEEDED" or None, 10, "the owner's result")
        [attempt] = list(reader.list_job_attempts(job.name))
        assert attempt.fencing_token == ref.fencing_token  # the thief can read the right token
    thief = RawStream(suite, thief_key)
    thief.send(hello=wpb.WorkerHello(worker_id="w1", namespace="acme-3", queues=["jobs"], credits=1))
    thief.next("welcome")
    thief.send(results=wpb.AttemptResults(results=[done]))  # the very result the owner sent
    [ack] = thief.next("acks").acks.acks
    assert (ack.kind, ack.ok, ack.reason) == (wpb.ACK_KIND_RESULT, False, "STALE_ATTEMPT")
    missing = wpb.AttemptRef(
        job=f"namespaces/acme-3/jobs/{uuid.uuid4()}", attempt=1, version=1, fencing_token=ref.fencing_token
    )
    thief.send(results=wpb.AttemptResults(results=[wpb.AttemptResult(attempt=missing)]))
    [ack2] = thief.next("acks").acks.acks
    assert (ack2.ok, ack2.reason) == (ack.ok, ack.reason)  # a finished attempt looks like none at all
    thief.close()
