"""Hostile-tenant benchmark: what each attack class of a hostile tenant costs an honest tenant and the processes.

Usage: ``python -m bench.hostile [--seconds 10] [--attacks a,b,...] [--probe-rate 10] [--fast]``

One secure suite (TLS, API keys; api, dispatcher, planner, reaper processes; embedded PostgreSQL,
durable unless ``--fast``) with the **default** limits and quotas of docs/security.md. The honest
tenant is namespace ``probe``: a ``gnomon worker`` on queues ``latency`` and ``limited`` and probe
jobs created due now at ``--probe-rate`` per second (bench.fairness's probe). The attackers are
principals of namespace ``evil`` acting inside their own grants (``evil-worker``: worker on every
queue of ``evil``; ``evil-op``: operator and client of ``evil``), and ``nobody`` (no grant at all).

For each attack class, run alone for ``--seconds`` while the probe runs, one JSON line:
``probe_lag`` (p50/p99/max ms and count of the probe jobs created during the attack, dispatch lag by
the database clock), ``rss_mb`` (the largest VmRSS of every suite process sampled every 0.25 s
during the attack, and its value before), the attack's own outcome counts by gRPC status code, and
what the attack class adds (audit rows written meanwhile, limit kept, ...). Attack classes:

- ``refused_nul``: ``nobody`` sends ``CreateJob(parent="namespaces/probe\\x00")``;
  ``audit_rows`` counts the audit rows written during the attack (the probe's creates are audited).
- ``unknown_writes``: one ``evil-worker`` stream sends accepts, heartbeats and results of attempts
  it was never given, 100 refs a message.
- ``many_targets``: ``evil-worker`` opens 50 streams of 100 queue names each with credits.
- ``many_streams``: ``evil-worker`` opens up to 3,000 streams.
- ``slow_reader``: ``evil-op`` makes 200 jobs of 256 KiB due now; an ``evil-worker`` stream with
  1,000 credits never reads.
- ``big_lists``: 8 concurrent ``ListJobs`` (page size 1,000) over 300 jobs of 256 KiB.
- ``bad_tokens``: anonymous callers with malformed bearer tokens: ``api_log_bytes`` grown.
- ``refused_flood``: ``evil-op`` sends ``CreateJob`` to namespace ``probe`` (PERMISSION_DENIED);
  ``audit_rows_evil`` counts the audit rows it caused.
- ``limit_flood`` (last, its limits stay): ``evil-op`` sets rate limits on up to 25,000 queues, then
  the probe's ``limited`` queue (1/s, burst 1) gets 30 due jobs: ``limited_dispatched_in_10s``
  (<= 11 holds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg

from bench.fairness import lag, probes, row
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon._proto.gnomon.v1 import queue_service_pb2 as qs
from gnomon._proto.gnomon.v1 import queue_service_pb2_grpc as qg
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wg
from gnomon.cli.suite import Suite
from gnomon.common.config import DevServerSettings
from gnomon.devservers import PostgresServer, free_port
from gnomon.sdk import Client
from gnomon.sdk.connection import aio_channel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = b"x" * (256 * 1024)


def rss_mb(pid: int) -> float:
    """Current resident set size (VmRSS) of a live process, MiB (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


class RssSampler:
    """Samples every suite process's VmRSS every 0.25 s from start to stop; ``peak`` maps
    ``role[-n]`` to the largest value seen, MiB."""

    def __init__(self, suite: Suite) -> None:
        self.procs = {f"{p.role}-{i}": p.popen.pid for i, p in enumerate(suite.procs)}
        self.before = {k: rss_mb(pid) for k, pid in self.procs.items()}
        self.peak = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for k, pid in self.procs.items():
                self.peak[k] = max(self.peak[k], rss_mb(pid))

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        self._thread.join()
        return {k: {"before": self.before[k], "peak": self.peak[k]} for k in self.procs}


def code_of(e: BaseException) -> str:
    """The gRPC status code name of ``e`` if it is a call's error, else its class name."""
    return e.code().name if isinstance(e, grpc.aio.AioRpcError | grpc.Call) else type(e).__name__


async def repeat(seconds: float, concurrency: int, call: Callable[[int], Awaitable[Any]]) -> Counter[str]:
    """Calls ``call(i)`` from ``concurrency`` tasks until ``seconds`` passed; counts outcomes by code."""
    end = time.monotonic() + seconds
    counts: Counter[str] = Counter()
    n = 0

    async def one() -> None:
        nonlocal n
        while time.monotonic() < end:
            n += 1
            try:
                await call(n)
                counts["OK"] += 1
            except (grpc.RpcError, TimeoutError) as e:
                counts[code_of(e)] += 1

    await asyncio.gather(*[one() for _ in range(concurrency)])
    return counts


class Stream:
    """A raw lease stream of ``key`` to ``address`` in the running loop: ``open(hello)`` returns the
    first response's kind or the refusal's code; ``reader``: drain responses in a task."""

    def __init__(self, address: str, key: str) -> None:
        self.channel = aio_channel(address, api_key=key)
        self.call = wg.WorkerServiceStub(self.channel).Lease()
        self.task: asyncio.Task[None] | None = None

    async def open(self, queues: list[str], credits: int, read: bool = True) -> str:
        hello = wpb.WorkerHello(worker_id=uuid.uuid4().hex[:8], queues=queues, credits=credits)
        try:
            await self.call.write(wpb.LeaseRequest(hello=hello))
            first = await asyncio.wait_for(self.call.read(), 30)
        except (grpc.RpcError, TimeoutError) as e:
            return code_of(e)
        if first is grpc.aio.EOF:
            return "EOF"
        if read:
            self.task = asyncio.ensure_future(self._drain())
        return "OK"

    async def _drain(self) -> None:
        try:
            while await self.call.read() is not grpc.aio.EOF:
                pass
        except (grpc.RpcError, asyncio.CancelledError):
            pass

    async def close(self) -> None:
        self.call.cancel()
        if self.task:
            self.task.cancel()
        await self.channel.close()


async def create_many(
    api: str, key: str | None, namespace: str, queue: str, n: int, payload: bytes, delay_s: float
) -> None:
    """Creates ``n`` jobs of ``namespace``/``queue`` due in ``delay_s`` s as ``key`` (None: the
    admin), through ``CreateJob`` calls 8 at a time (a batch of 256 KiB payloads would pass the
    4 MiB message limit)."""
    async with aio_channel(api) if key is None else aio_channel(api, api_key=key) as ch:
        stub = jg.JobServiceStub(ch)
        req = js.CreateJobRequest(parent=f"namespaces/{namespace}", queue=queue, payload=payload)
        req.delay.FromSeconds(int(delay_s))
        left = iter(range(n))

        async def one() -> None:
            for _ in left:
                await stub.CreateJob(req, timeout=30)

        await asyncio.gather(*[one() for _ in range(8)])


def dispatcher(suite: Suite) -> str:
    return next(p.address for p in suite.procs if p.role == "dispatcher")


async def open_streams(suite: Suite, key: str, n: int, queues: Callable[[int], list[str]], credits: int):
    """Opens up to ``n`` streams (64 hellos in flight); returns ``(streams, outcome counts)``."""
    streams: list[Stream] = []
    counts: Counter[str] = Counter()
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            s = Stream(dispatcher(suite), key)
            got = await s.open(queues(i), credits)
            counts[got] += 1
            if got == "OK":
                streams.append(s)
            else:
                await s.close()

    await asyncio.gather(*[one(i) for i in range(n)])
    return streams, counts


async def hold(streams: list[Stream], seconds: float) -> None:
    await asyncio.sleep(seconds)
    await asyncio.gather(*[s.close() for s in streams])


@dataclass
class Ctx:
    """What an attack class needs: the suite, the principals' keys, its duration, a DB connection."""

    suite: Suite
    keys: dict[str, str]
    seconds: float
    conn: Any

    @property
    def api(self) -> str:
        return self.suite.api_address


async def refused(ctx: Ctx, who: str, parent: str) -> dict[str, Any]:
    async with aio_channel(ctx.api, api_key=ctx.keys[who]) as ch:
        stub = jg.JobServiceStub(ch)
        req = js.CreateJobRequest(parent=parent, queue="latency")
        counts = await repeat(ctx.seconds, 8, lambda _: stub.CreateJob(req, timeout=10))
    return {"calls": dict(counts)}


async def refused_nul(ctx: Ctx) -> dict[str, Any]:
    return await refused(ctx, "nobody", "namespaces/probe\x00")


async def refused_flood(ctx: Ctx) -> dict[str, Any]:
    return await refused(ctx, "evil-op", "namespaces/probe")


async def unknown_writes(ctx: Ctx) -> dict[str, Any]:
    s = Stream(dispatcher(ctx.suite), ctx.keys["evil-worker"])
    opened = await s.open(["noise"], 1)
    refs = [
        wpb.AttemptRef(job=f"namespaces/evil/jobs/{uuid.uuid4()}", attempt=1, version=1, fencing_token=1)
        for _ in range(100)
    ]
    results = [wpb.AttemptResult(attempt=r, outcome=wpb.OUTCOME_SUCCEEDED) for r in refs]
    kinds = [
        wpb.LeaseRequest(accepts=wpb.AttemptRefs(attempts=refs)),
        wpb.LeaseRequest(heartbeats=wpb.Heartbeats(attempts=refs)),
        wpb.LeaseRequest(results=wpb.AttemptResults(results=results)),
    ]
    sent = 0
    end = time.monotonic() + ctx.seconds
    try:
        while opened == "OK" and time.monotonic() < end:
            await asyncio.wait_for(s.call.write(kinds[sent % 3]), max(0.01, end - time.monotonic()))
            sent += 1
    except (TimeoutError, grpc.RpcError):
        pass
    await s.close()
    return {"opened": opened, "messages_sent": sent, "refs_sent": sent * 100}


async def streams_held(ctx: Ctx, n: int, queues: Callable[[int], list[str]], credits: int) -> dict[str, Any]:
    t0 = time.monotonic()
    streams, counts = await open_streams(ctx.suite, ctx.keys["evil-worker"], n, queues, credits)
    await hold(streams, max(1.0, ctx.seconds - (time.monotonic() - t0)))
    return {"streams": dict(counts)}


async def many_targets(ctx: Ctx) -> dict[str, Any]:
    return await streams_held(ctx, 50, lambda i: [f"t{i}-{q}" for q in range(100)], 10)


async def many_streams(ctx: Ctx) -> dict[str, Any]:
    return await streams_held(ctx, 3000, lambda i: ["s"], 1)


async def slow_reader(ctx: Ctx) -> dict[str, Any]:
    await create_many(ctx.api, ctx.keys["evil-op"], "evil", "big", 200, BIG, delay_s=0)
    s = Stream(dispatcher(ctx.suite), ctx.keys["evil-worker"])
    opened = await s.open(["big"], 1000, read=False)
    await asyncio.sleep(ctx.seconds)
    await s.close()
    return {"opened": opened}


async def big_lists(ctx: Ctx) -> dict[str, Any]:
    await create_many(ctx.api, ctx.keys["evil-op"], "evil", "lists", 300, BIG, delay_s=3600)
    async with aio_channel(ctx.api, api_key=ctx.keys["evil-op"]) as ch:
        stub = jg.JobServiceStub(ch)
        req = js.ListJobsRequest(parent="namespaces/evil", queue="lists", page_size=1000)
        counts = await repeat(ctx.seconds, 8, lambda _: stub.ListJobs(req, timeout=30))
    return {"calls": dict(counts)}


async def limit_flood(ctx: Ctx) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    async with aio_channel(ctx.api, api_key=ctx.keys["evil-op"]) as ch:
        stub = qg.QueueServiceStub(ch)
        numbers = iter(range(25_000))

        async def one() -> None:
            for i in numbers:
                if counts["RESOURCE_EXHAUSTED"] >= 20:
                    return
                req = qs.SetQueueRateLimitRequest(name=f"namespaces/evil/queues/l{i}", rate=1000, burst=1)
                try:
                    await stub.SetQueueRateLimit(req, timeout=30)
                    counts["OK"] += 1
                except grpc.RpcError as e:
                    counts[code_of(e)] += 1

        await asyncio.gather(*[one() for _ in range(16)])
    t0 = row(ctx.conn, "SELECT now()")[0]
    with Client(api=ctx.api, namespace="probe") as admin:
        admin.set_queue_rate_limit("limited", 1.0, 1)
    await create_many(ctx.api, None, "probe", "limited", 30, b"", delay_s=0)
    await asyncio.sleep(10)
    dispatched = row(
        ctx.conn,
        "SELECT count(*) FROM jobs WHERE namespace = 'probe' AND queue = 'limited' "
        "AND dispatched_at IS NOT NULL AND dispatched_at < %s + interval '10 seconds'",
        (t0,),
    )[0]
    return {"limits_set": dict(counts), "limited_dispatched_in_10s": dispatched, "allowed": 11}


async def bad_tokens(ctx: Ctx) -> dict[str, Any]:
    log = next(p.log_path for p in ctx.suite.procs if p.role == "api")
    size0 = os.stat(log).st_size
    tokens = ["x", "a.b.c", "eyJhbGciOiJFUzI1NiIsImtpZCI6InJzYSJ9.e30.AAAA", "gn_" + "0" * 40]
    ca = Path(os.environ["GNOMON_TLS_CA_FILE"]).read_bytes()  # noqa: ASYNC240 (before the attack)
    anonymous = grpc.ssl_channel_credentials(ca)
    async with grpc.aio.secure_channel(ctx.api, anonymous) as ch:
        stub = jg.JobServiceStub(ch)
        req = js.GetJobRequest(name=f"namespaces/probe/jobs/{uuid.uuid4()}")
        counts = await repeat(
            ctx.seconds,
            8,
            lambda i: stub.GetJob(req, timeout=10, metadata=[("authorization", f"Bearer {tokens[i % 4]}")]),
        )
    grown = os.stat(log).st_size - size0
    return {"calls": dict(counts), "api_log_bytes": grown}


#: The attack classes in the order they run (module docstring).
ATTACKS: dict[str, Callable[[Ctx], Awaitable[dict[str, Any]]]] = {
    f.__name__: f
    for f in (
        refused_nul,
        unknown_writes,
        many_targets,
        many_streams,
        slow_reader,
        big_lists,
        bad_tokens,
        refused_flood,
        limit_flood,  # last: the limits it leaves behind would weigh on the classes after it
    )
}


def audit_rows(conn, since: object, actor: str | None = None) -> int:
    """Audit rows written since ``since`` (database clock), of ``actor`` if given."""
    sql = "SELECT count(*) FROM audit_log WHERE created_at >= %s" + (" AND actor = %s" if actor else "")
    return int(row(conn, sql, (since, actor) if actor else (since,))[0])


def setup(suite: Suite) -> dict[str, str]:
    """Namespaces ``probe`` and ``evil``, the attackers' principals; returns their API keys."""
    keys: dict[str, str] = {}
    with Client(api=suite.api_address) as admin:
        for ns in ("probe", "evil"):
            admin.create_namespace(ns)
        for pid, grants in {
            "evil-worker": [("worker", "evil")],
            "evil-op": [("operator", "evil"), ("client", "evil")],
            "nobody": [],
        }.items():
            admin.create_principal(pid)
            for role, ns in grants:
                admin.grant_role(pid, role, ns)
            keys[pid] = admin.create_api_key(pid).token
    return keys


def run(args) -> None:
    pg = PostgresServer(durable=not args.fast, **DevServerSettings().model_dump()).start()
    db = f"hostile_{uuid.uuid4().hex[:8]}"
    url = pg.create_database(db)
    suite = Suite(api_listen=f"127.0.0.1:{free_port()}", database_url=url)
    try:
        suite.start()
        os.environ.update(suite.client_env())  # this process's clients: the suite's CA and admin key
        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
        keys = setup(suite)
        suite.start_worker(
            ["latency", "limited"],
            "bench.handlers:noop",
            concurrency=64,
            env={"PYTHONPATH": ROOT},
            extra=["--namespace", "probe"],
        )
        time.sleep(2)  # the probe's worker connected
        for name in ["quiet", *args.attacks]:
            sampler = RssSampler(suite)
            t0 = row(conn, "SELECT now()")[0]

            async def both(name: str = name) -> tuple[dict[str, Any], int]:
                ctx = Ctx(suite, keys, args.seconds, conn)
                work = asyncio.sleep(args.seconds) if name == "quiet" else ATTACKS[name](ctx)
                out, n = await asyncio.gather(work, probes(suite.api_address, args.probe_rate, args.seconds))
                return (out or {}), n

            out, _ = asyncio.run(both())
            t1 = row(conn, "SELECT now()")[0]
            time.sleep(2)  # the last probes dispatched
            line = {
                "bench": "hostile",
                "attack": name,
                "seconds": args.seconds,
                "probe_lag": lag(conn, t0, t1),
                "rss_mb": sampler.stop(),
                "audit_rows": audit_rows(conn, t0),
                "audit_rows_evil": audit_rows(conn, t0, "evil-op"),
                **out,
                "durable": not args.fast,
            }
            print(json.dumps(line), flush=True)
        conn.close()
    finally:
        suite.stop()
        pg.drop_database(db)
        pg.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--probe-rate", type=float, default=10.0)
    ap.add_argument("--attacks", type=lambda s: s.split(","), default=list(ATTACKS))
    ap.add_argument("--fast", action="store_true", help="Embedded PostgreSQL without fsync.")
    run(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
