"""The worker stream's edge validation (docs/api.md "Worker stream limits") against a real suite:
``gnomon api``, ``gnomon dispatcher``, ``planner``, ``reaper`` processes, PostgreSQL and etcd.

Bad hellos are sent on raw ``gnomon.v1.WorkerService.Lease`` streams (protobuf messages, no SDK), and
an honest SDK worker on another stream must keep completing jobs during and after the attack.
"""

from __future__ import annotations

import os
import queue as q
import threading
import time

import grpc
import pytest

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc
from gnomon.sdk import Client
from gnomon.sdk.connection import open_channel
from gnomon_test_support import records, running_suite, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELLO_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("suite"),
        env={
            "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1",
            "GNOMON_DISPATCHER_HELLO_TIMEOUT_S": str(HELLO_TIMEOUT_S),
        },
    ) as s:
        yield s


def dispatcher(suite) -> str:
    return next(p.address for p in suite.procs if p.role == "dispatcher")


class RawStream:
    """A Lease stream fed from a queue: ``send`` a LeaseRequest, iterate ``call`` for responses."""

    def __init__(self, address: str, timeout_s: float = 30.0):
        self.out: q.Queue = q.Queue()
        self.channel = open_channel(address)
        self.call = wgrpc.WorkerServiceStub(self.channel).Lease(self._reqs(), timeout=timeout_s)

    def _reqs(self):
        while True:
            item = self.out.get()
            if item is None:
                return
            yield item

    def send(self, msg: wpb.LeaseRequest) -> None:
        self.out.put(msg)

    def close(self) -> None:
        self.out.put(None)
        self.call.cancel()
        self.channel.close()


def refused_hello(address: str, hello: wpb.WorkerHello) -> grpc.RpcError:
    """Sends ``hello`` and returns the error that ends the stream (fails if anything else comes)."""
    s = RawStream(address, timeout_s=15)
    s.send(wpb.LeaseRequest(hello=hello))
    try:
        for msg in s.call:
            raise AssertionError(f"the bad hello was answered: {msg.WhichOneof('kind')}")
    except grpc.RpcError as e:
        return e
    finally:
        s.close()
    raise AssertionError("the stream ended without an error")


def start_honest_worker(suite, queue: str, record: str):
    env = {"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR}
    return suite.start_worker([queue], "gnomon_test_handlers:record", concurrency=8, env=env)


def test_nul_in_a_queue_is_refused_and_an_honest_worker_keeps_getting_jobs(suite):
    addr = dispatcher(suite)
    record = os.path.join(suite.work_dir, "honest.txt")
    worker = start_honest_worker(suite, "honest", record)
    errors: list[grpc.RpcError] = []
    stop = threading.Event()

    def attack() -> None:
        while not stop.is_set():
            errors.append(
                refused_hello(
                    addr,
                    wpb.WorkerHello(
                        worker_id="intruder", queues=["honest", "a", "b", "x\x00y", "c"], credits=10
                    ),
                )
            )

    attacker = threading.Thread(target=attack, daemon=True)
    try:
        with Client(api=suite.api_address) as c:
            before = [c.create_job("honest", b"{}") for _ in range(5)]
            attacker.start()
            wait_for(lambda: len(errors) >= 3, 30, "the attack to start")
            during = [c.create_job("honest", b"{}") for _ in range(5)]
            # jobs created while the attack runs complete while it still runs
            wait_for(
                lambda: all(c.get_job(j.name).state == "SUCCEEDED" for j in before + during),
                30,
                "jobs created before and during the attack to succeed",
            )
            n_during = len(errors)
            stop.set()
            attacker.join(20)
            after = [c.create_job("honest", b"{}") for _ in range(3)]
            wait_for(
                lambda: all(c.get_job(j.name).state == "SUCCEEDED" for j in after),
                30,
                "jobs created after the attack to succeed",
            )
        assert len(records(record)) >= 13
        assert n_during >= 3
    finally:
        stop.set()
        suite.stop_proc(worker)
    for e in errors:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "hello.queues[3]" in e.details()
        assert "hello.queues[0]" not in e.details()


def test_namespace_with_extra_segments_is_refused(suite):
    e = refused_hello(
        dispatcher(suite), wpb.WorkerHello(worker_id="w", namespace="x/y/alice", queues=["q"], credits=1)
    )
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello.namespace" in e.details()
    e2 = refused_hello(
        dispatcher(suite),
        wpb.WorkerHello(worker_id="w", namespace="namespaces/alice/x", queues=["q"], credits=1),
    )
    assert "hello.namespace" in e2.details()


def test_five_thousand_queues_are_refused(suite):
    queues = [f"q{i}" for i in range(5000)]
    e = refused_hello(dispatcher(suite), wpb.WorkerHello(worker_id="w", queues=queues, credits=1))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello.queues: at most 100 queues, got 5000" in e.details()


def test_worker_id_with_a_newline_is_refused_and_not_logged_raw(suite):
    wid = "w1\nFORGED dispatcher line " + "z" * 500
    e = refused_hello(dispatcher(suite), wpb.WorkerHello(worker_id=wid, queues=["q"], credits=1))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hello.worker_id" in e.details()
    assert "\n" not in e.details()
    assert len(e.details()) < 300  # the echoed value is cut to 64 characters
    # the refusal is logged with the value escaped: no log line starts with the forged text
    log_path = next(p.log_path for p in suite.procs if p.role == "dispatcher")

    def logged() -> bool:
        with open(log_path, errors="replace") as f:
            return "FORGED" in f.read()

    wait_for(logged, 10, "the refused hello to be logged")
    with open(log_path, errors="replace") as f:
        assert not any(line.startswith("FORGED") for line in f)


def test_stream_without_hello_is_closed_within_the_timeout(suite):
    s = RawStream(dispatcher(suite), timeout_s=30)
    t0 = time.monotonic()
    try:
        with pytest.raises(grpc.RpcError) as ei:
            for _ in s.call:
                pass
        elapsed = time.monotonic() - t0
    finally:
        s.close()
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no hello" in ei.value.details()
    assert HELLO_TIMEOUT_S * 0.9 <= elapsed < HELLO_TIMEOUT_S + 5


def test_malformed_ref_in_results_is_refused_alone(suite):
    s = RawStream(dispatcher(suite), timeout_s=60)
    try:
        s.send(
            wpb.LeaseRequest(
                hello=wpb.WorkerHello(
                    worker_id="raw-1", namespace="namespaces/default", queues=["refs"], credits=1
                )
            )
        )
        responses = iter(s.call)
        assert next(responses).WhichOneof("kind") == "welcome"
        with Client(api=suite.api_address) as c:
            job = c.create_job("refs", b"{}")
            msg = next(responses)
            assert msg.WhichOneof("kind") == "assignments"
            [a] = msg.assignments.assignments
            assert a.attempt.job == job.name
            s.send(wpb.LeaseRequest(accepts=wpb.AttemptRefs(attempts=[a.attempt])))
            acks = [ack for ack in next(responses).acks.acks]
            assert [(x.kind, x.ok) for x in acks] == [(wpb.ACK_KIND_ACCEPT, True)]
            bad = wpb.AttemptRef(
                job=job.name.replace("/jobs/", "/jobs/\x00"),
                attempt=a.attempt.attempt,
                version=a.attempt.version,
                fencing_token=a.attempt.fencing_token,
            )
            s.send(
                wpb.LeaseRequest(
                    results=wpb.AttemptResults(
                        results=[
                            wpb.AttemptResult(attempt=bad, outcome=wpb.OUTCOME_SUCCEEDED),
                            wpb.AttemptResult(attempt=a.attempt, outcome=wpb.OUTCOME_SUCCEEDED),
                        ]
                    )
                )
            )
            got: dict[str, tuple[bool, str]] = {}
            while len(got) < 2:
                for ack in next(responses).acks.acks:
                    assert ack.kind == wpb.ACK_KIND_RESULT
                    got[ack.attempt.job] = (ack.ok, ack.reason)
            assert got[bad.job] == (False, "INVALID_FIELD")
            assert got[job.name] == (True, "")
            assert c.get_job(job.name).state == "SUCCEEDED"
    finally:
        s.close()
