"""Worker partition (docs/faults.md): a worker cut off from its dispatcher until its lease expires.

Worker W1 reaches the dispatcher only through a :class:`FaultProxy` (SDK ``Worker`` with static
``dispatchers=[proxy]``; W2 connects directly). W1 accepts attempt 1 of an ``idempotent`` job with a
2 s lease and runs a long handler; the proxy goes ``blackhole`` (no RST, no FIN: heartbeats vanish).
The lease ends, the reaper marks attempt 1 ``LOST`` and schedules attempt 2, W2 runs it, the job is
``SUCCEEDED`` once. W1's SDK stops trusting the lease locally, cancels its handler and reports
nothing (event ``dropped``). When the proxy is restored, the cut-off side's late result for attempt 1
(sent on a fresh Lease stream through the proxy, with attempt 1's token, as a worker without the
SDK's local lease check would) is refused by the dispatcher (``LEASE_EXPIRED`` / ``STALE_ATTEMPT``),
and nothing changes in the database. The history checker runs at the end.

Run as a script, this module is the worker (``python test_worker_partition.py QUEUE DISPATCHER EVENTS``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from gnomon.sdk.connection import open_channel

FAULTS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, FAULTS_DIR)

from history import History, check, worker_env  # noqa: E402

pytestmark = pytest.mark.faults


def start_static_worker(suite, queue: str, dispatcher: str, record: str, events: str, worker_id: str):
    """A worker process (this file as a script) connected to ``dispatcher`` only."""
    n = sum(1 for p in suite.procs if p.role == "worker")
    log_path = os.path.join(suite.log_dir, f"worker-{n}.log")
    e = dict(os.environ, PYTHONUNBUFFERED="1", **worker_env(record))
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        popen = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), queue, dispatcher, events, worker_id],
            env=e,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    from gnomon.cli.suite import Proc

    p = Proc("worker", "", popen, log_path)
    suite.procs.append(p)
    return p


def late_result(address: str, job: str, attempt: int, version: int, token: int) -> tuple[bool, str]:
    """Sends one SUCCEEDED result on a fresh Lease stream; returns the ack's (ok, reason)."""
    import queue as q

    from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
    from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc

    out: q.Queue = q.Queue()
    out.put(wpb.LeaseRequest(hello=wpb.WorkerHello(worker_id="late-w1", queues=["part"], credits=1)))
    ref = wpb.AttemptRef(job=job, attempt=attempt, version=version, fencing_token=token)
    out.put(
        wpb.LeaseRequest(
            results=wpb.AttemptResults(
                results=[wpb.AttemptResult(attempt=ref, outcome=wpb.OUTCOME_SUCCEEDED)]
            )
        )
    )

    def reqs():
        while True:
            item = out.get()
            if item is None:
                return
            yield item

    with open_channel(address) as ch:
        call = wgrpc.WorkerServiceStub(ch).Lease(reqs(), timeout=10)
        try:
            for msg in call:
                if msg.WhichOneof("kind") == "acks":
                    for ack in msg.acks.acks:
                        if ack.kind == wpb.ACK_KIND_RESULT:
                            return ack.ok, ack.reason
        finally:
            out.put(None)
            call.cancel()
    raise AssertionError("no result ack")


@pytest.mark.parametrize("seed", [11])
def test_blackholed_worker_loses_its_lease_and_its_late_result_is_refused(
    pg_server, migrated_template, tmp_path, seed
):
    from faultproxy import FaultProxy

    from gnomon.sdk import Client
    from gnomon_test_support import records, running_suite, sql, wait_for

    rng = random.Random(seed)
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        env={
            "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
            "GNOMON_DISPATCHER_RELAY_INTERVAL_S": "0.5",
            "GNOMON_REAPER_INTERVAL_S": "0.3",
            "GNOMON_REAPER_SKEW_MARGIN_S": "0.5",
        },
    ) as s:
        url = s.database_url
        record, ev1, ev2 = (str(tmp_path / f) for f in ("runs.txt", "events-w1.txt", "events-w2.txt"))
        proxy = None
        try:
            s.start()
            disp = next(p for p in s.procs if p.role == "dispatcher")
            proxy = FaultProxy(disp.address).start()
            start_static_worker(s, "part", proxy.address, record, ev1, "w1")
            h = History()
            lease = timedelta(seconds=2)
            # a seeded handful of quick jobs first (all through W1 while the link is healthy), then the victim
            with Client(api=s.api_address) as c:
                quick = [
                    c.create_job(
                        "part",
                        b"{}",
                        delay=timedelta(seconds=rng.uniform(0, 0.5)),
                        idempotent=True,
                        lease_duration=lease,
                    )
                    for _ in range(rng.randint(3, 8))
                ]
                for j in quick:
                    h.created(j, idempotent=True)
                wait_for(
                    lambda: all(c.get_job(j.name).state == "SUCCEEDED" for j in quick), 20, "quick jobs done"
                )
                job = c.create_job(
                    "part",
                    json.dumps({"sleep": 20, "sleep_attempts": [1]}).encode(),
                    idempotent=True,
                    lease_duration=lease,
                    max_attempts=3,
                )
                h.created(job, idempotent=True)
                wait_for(
                    lambda: any(r[0] == job.name and r[1] == "1" for r in records(record)),
                    20,
                    "attempt 1 running on W1",
                )
                proxy.set_mode("blackhole")
                cut = time.monotonic()
                start_static_worker(s, "part", disp.address, record, ev2, "w2")
                jid = job.name.rsplit("/", 1)[1]
                wait_for(
                    lambda: (
                        sql(url, "SELECT state FROM attempts WHERE job_id = %s AND attempt = 1", jid)[0][0]
                        == "LOST"
                    ),
                    15,
                    "attempt 1 LOST",
                )
                lost_s = time.monotonic() - cut
                done = wait_for(
                    lambda: (x := c.get_job(job.name)).state == "SUCCEEDED" and x, 20, "attempt 2 to succeed"
                )
                recovered_s = time.monotonic() - cut
                dropped = wait_for(
                    lambda: (
                        [
                            ln
                            for ln in Path(ev1).read_text().splitlines()
                            if job.name in ln and "dropped" in ln
                        ]
                        if os.path.exists(ev1)
                        else None
                    ),
                    10,
                    "W1 to drop attempt 1 locally",
                )
                proxy.set_mode("pass")
                [(version, token)] = sql(
                    url, "SELECT version, token FROM attempts WHERE job_id = %s AND attempt = 1", jid
                )
                ok, reason = late_result(proxy.address, job.name, 1, version, token)
                time.sleep(0.3)  # an observation window: a wrongly accepted late result would land in it
                final = c.get_job(job.name)
            rows = sql(
                url, "SELECT attempt, state, worker_id FROM attempts WHERE job_id = %s ORDER BY attempt", jid
            )
            h.collect(url, record)
            report = check(h)
            print(
                f"\nseed {seed}: lease LOST {lost_s:.2f} s after the cut, job SUCCEEDED {recovered_s:.2f} s after, "
                f"late result -> ok={ok} reason={reason}; W1 {dropped}; attempts {rows}; proxy {dict(proxy.stats)}\n{report}"
            )
            assert done.attempt == 2
            assert [(a, st) for a, st, _ in rows] == [(1, "LOST"), (2, "SUCCEEDED")]
            assert rows[0][2] != rows[1][2]  # another worker ran the retry
            assert not ok and reason in ("LEASE_EXPIRED", "STALE_ATTEMPT", "STALE_FENCING_TOKEN"), (
                ok,
                reason,
            )
            assert (
                final.state == "SUCCEEDED" and final.version == done.version
            )  # the late result changed nothing
            assert report.ok, report
        finally:
            s.stop()  # before the proxy goes (running_suite stops it again: a no-op)
            if proxy is not None:
                proxy.stop()


def _worker_main(queue: str, dispatcher: str, events: str, worker_id: str) -> None:
    from history import run

    from gnomon.sdk import Worker

    def on_event(kind, ctx):
        with open(events, "a") as f:
            f.write(f"{time.time():.3f} {kind} {ctx.job} {ctx.attempt}\n")

    Worker(
        [queue], run, dispatchers=[dispatcher], concurrency=4, worker_id=worker_id, on_event=on_event
    ).run()


if __name__ == "__main__":
    _worker_main(*sys.argv[1:5])
