"""Traces end to end (docs/tracing.md): real ``gnomon api/dispatcher/planner/reaper`` processes export
their spans to a file (``GNOMON_TRACES_EXPORTER=file``); a Python SDK worker runs in this process
with an in-memory exporter on the tracer provider the test installs, as an application would. The
two sets of spans must form one tree per job: create -> claim -> deliver -> {accept, handler ->
user span, result}, and an occurrence's trace must link to the planning step that made it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gnomon.sdk import Client, RetryPolicy, Worker
from gnomon_test_support import running_suite, sql, wait_for

Span = dict[str, Any]

_EXPORTER = InMemorySpanExporter()


def _app_provider() -> None:
    """Installs (once per process) the application's tracer provider with the in-memory exporter."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        if getattr(current, "_gnomon_test_memory", False):
            return
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        current = provider
    current._gnomon_test_memory = True  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    work = tmp_path_factory.mktemp("traces")
    env = {
        "GNOMON_TRACES_EXPORTER": "file",
        "GNOMON_TRACES_FILE": str(work / "server-spans.jsonl"),
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within 50 ms (the default is 5 s)
        "GNOMON_PLANNER_MAX_IDLE_POLL_S": "0.5",
    }
    with running_suite(pg_server, migrated_template, work, env=env) as s:
        s.spans_file = str(work / "server-spans.jsonl")
        yield s


def _hex(n: int, width: int) -> str:
    return f"0x{n:0{width}x}"


def _memory_span(s: ReadableSpan) -> Span:
    assert s.context is not None
    return {
        "name": s.name,
        "trace": _hex(s.context.trace_id, 32),
        "id": _hex(s.context.span_id, 16),
        "parent": _hex(s.parent.span_id, 16) if s.parent is not None else None,
        "attrs": dict(s.attributes or {}),
        "links": [_hex(link.context.span_id, 16) for link in s.links],
        "status": s.status.status_code.name,
        "service": "app",
    }


def _file_span(d: dict[str, Any]) -> Span:
    return {
        "name": d["name"],
        "trace": d["context"]["trace_id"],
        "id": d["context"]["span_id"],
        "parent": d["parent_id"],
        "attrs": d["attributes"],
        "links": [link["context"]["span_id"] for link in d.get("links", [])],
        "status": d["status"]["status_code"],
        "service": d["resource"]["attributes"]["service.name"],
    }


def all_spans(suite) -> list[Span]:
    """The servers' spans (from their file) and this process's (in memory)."""
    out = [_memory_span(s) for s in _EXPORTER.get_finished_spans()]
    path = Path(suite.spans_file)
    if path.exists():
        out += [_file_span(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return out


def job_trace(suite, job: str, want: set[tuple[str, int]]) -> list[Span]:
    """The spans of ``job``'s trace once every ``(name, attempt)`` of ``want`` is there (attempt 0:
    a span without ``gnomon.attempt``)."""

    def ready() -> list[Span] | None:
        spans = all_spans(suite)
        roots = [s for s in spans if s["name"] == "gnomon.job.create" and s["attrs"].get("gnomon.job") == job]
        if not roots:
            return None
        tid = roots[0]["trace"]
        mine = [s for s in spans if s["trace"] == tid]
        have = {(s["name"], int(s["attrs"].get("gnomon.attempt", 0))) for s in mine}
        return mine if want <= have else None

    return wait_for(ready, 30, f"the spans {sorted(want)} of {job}")


def one(spans: list[Span], name: str, attempt: int | None = None) -> Span:
    found = [
        s
        for s in spans
        if s["name"] == name and (attempt is None or s["attrs"].get("gnomon.attempt") == attempt)
    ]
    assert len(found) == 1, (name, attempt, found)
    return found[0]


@pytest.fixture
def worker_on(suite) -> Iterator:
    started: list[tuple[Worker, threading.Thread]] = []

    def start(queue: str, handler) -> Worker:
        w = Worker([queue], handler, api=suite.api_address, concurrency=2, drain_timeout=5)
        t = threading.Thread(target=w.run, name=f"worker-{queue}", daemon=True)
        t.start()
        started.append((w, t))
        return w

    yield start
    for w, t in started:
        w.stop()
        t.join(15)


def test_one_job_is_one_trace_from_create_to_result(suite, worker_on):
    _app_provider()
    app = trace.get_tracer("test.app")

    def handler(ctx):
        with app.start_as_current_span("user.work"):
            pass

    worker_on("tr-one", handler)
    with Client(api=suite.api_address) as c:
        with app.start_as_current_span("user.request") as request:
            job = c.create_job("tr-one", b"{}")
        wait_for(lambda: c.get_job(job.name).state == "SUCCEEDED", 30, "job to succeed")
    want = {(n, 1) for n in ("gnomon.claim", "gnomon.deliver", "gnomon.accept", "gnomon.handler")}
    spans = job_trace(suite, job.name, want | {("gnomon.result", 1), ("user.work", 0)})

    ctx = request.get_span_context()
    create = one(spans, "gnomon.job.create")
    claim, deliver = one(spans, "gnomon.claim"), one(spans, "gnomon.deliver")
    accept, handler_span = one(spans, "gnomon.accept"), one(spans, "gnomon.handler")
    result, user = one(spans, "gnomon.result"), one(spans, "user.work")
    # the caller's span is the root: the client sent its traceparent with CreateJob
    assert create["trace"] == _hex(ctx.trace_id, 32) and create["parent"] == _hex(ctx.span_id, 16)
    assert claim["parent"] == create["id"]
    assert deliver["parent"] == claim["id"]
    assert accept["parent"] == deliver["id"]
    assert handler_span["parent"] == deliver["id"]
    assert user["parent"] == handler_span["id"]
    assert result["parent"] == deliver["id"]
    assert {s["trace"] for s in spans} == {create["trace"]}
    assert [create["service"], claim["service"], handler_span["service"]] == [
        "gnomon-api",
        "gnomon-dispatcher",
        "app",
    ]
    for s in (claim, deliver, accept, handler_span, result):
        assert s["attrs"]["gnomon.job"] == job.name and s["attrs"]["gnomon.queue"] == "tr-one"
        assert s["attrs"]["gnomon.namespace"] == "default"
    assert result["attrs"]["gnomon.outcome"] == "SUCCEEDED" and result["status"] == "UNSET"
    assert claim["attrs"]["gnomon.fencing_token"] == handler_span["attrs"]["gnomon.fencing_token"] > 0


def test_a_retried_job_keeps_both_attempts_in_its_trace(suite, worker_on):
    _app_provider()
    app = trace.get_tracer("test.app")

    async def handler(ctx):
        with app.start_as_current_span("user.work"):
            await asyncio.sleep(0)
            if ctx.attempt == 1:
                raise RuntimeError("first attempt fails")

    worker_on("tr-retry", handler)
    with Client(api=suite.api_address) as c:  # no caller span: the create span is the root
        job = c.create_job(
            "tr-retry", b"", max_attempts=3, retry_policy=RetryPolicy(initial_backoff=0.2, max_backoff=0.5)
        )
    names = ("gnomon.claim", "gnomon.deliver", "gnomon.accept", "gnomon.handler", "gnomon.result")
    spans = job_trace(suite, job.name, {(n, a) for n in names for a in (1, 2)})

    create = one(spans, "gnomon.job.create")
    assert create["parent"] is None
    for attempt in (1, 2):
        claim = one(spans, "gnomon.claim", attempt)
        deliver = one(spans, "gnomon.deliver", attempt)
        handler_span = one(spans, "gnomon.handler", attempt)
        result = one(spans, "gnomon.result", attempt)
        assert claim["parent"] == create["id"]
        assert deliver["parent"] == claim["id"]
        assert handler_span["parent"] == deliver["id"] and result["parent"] == deliver["id"]
        assert one(spans, "gnomon.accept", attempt)["parent"] == deliver["id"]
    first, second = one(spans, "gnomon.result", 1), one(spans, "gnomon.result", 2)
    assert (first["attrs"]["gnomon.outcome"], first["attrs"]["gnomon.failure_class"]) == (
        "FAILED",
        "TRANSIENT",
    )
    assert first["status"] == "ERROR" and one(spans, "gnomon.handler", 1)["status"] == "ERROR"
    assert second["attrs"]["gnomon.outcome"] == "SUCCEEDED" and "gnomon.failure_class" not in second["attrs"]
    users = [s for s in spans if s["name"] == "user.work"]
    assert sorted(s["parent"] for s in users) == sorted(one(spans, "gnomon.handler", a)["id"] for a in (1, 2))
    assert {s["trace"] for s in spans} == {create["trace"]}


def test_an_occurrence_trace_links_to_the_planning_step(suite):
    with Client(api=suite.api_address) as c:
        start = datetime.now(UTC).replace(microsecond=0)
        sched = c.create_schedule("tr-sched", every=1, start_time=start, schedule_id="traced")
    try:

        def linked() -> tuple[Span, Span] | None:
            spans = all_spans(suite)
            plans = {s["id"]: s for s in spans if s["name"] == "gnomon.plan"}
            for s in spans:
                if s["name"] == "gnomon.job.create" and s["attrs"].get("gnomon.schedule") == sched.name:
                    assert len(s["links"]) == 1, s  # exactly the planning step that wrote it
                    plan = plans.get(s["links"][0])  # exported when the step ends, maybe later
                    if plan is not None:
                        return s, plan
            return None

        occurrence, plan = wait_for(linked, 30, "a traced occurrence of the schedule")
        assert occurrence["parent"] is None  # the root of the occurrence's own trace
        assert plan["service"] == "gnomon-planner"
        assert plan["trace"] != occurrence["trace"] and plan["attrs"]["gnomon.jobs"] >= 1
        assert occurrence["attrs"]["gnomon.nominal_time"]
        with Client(api=suite.api_address) as c:
            assert occurrence["attrs"]["gnomon.job"] in {j.name for j in c.list_jobs(queue="tr-sched")}
    finally:
        with Client(api=suite.api_address) as c:
            c.delete_schedule(sched.name)


async def test_a_batch_continues_the_callers_traceparent_one_create_span_per_job(suite):
    from gnomon._proto.gnomon.v1 import job_service_pb2 as js
    from gnomon._proto.gnomon.v1 import job_service_pb2_grpc
    from gnomon.sdk.connection import resolve

    trace_id, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with resolve(suite.api_address).aio_channel() as ch:
        r = await job_service_pb2_grpc.JobServiceStub(ch).BatchCreateJobs(
            js.BatchCreateJobsRequest(
                parent="namespaces/default",
                requests=[js.CreateJobRequest(queue="tr-batch") for _ in range(3)],
            ),
            metadata=[("traceparent", f"00-{trace_id}-{caller}-01"), ("tracestate", "shop=1")],
        )
    names = [j.name for j in r.jobs]
    stored = {
        str(job_id): ctx
        for job_id, ctx in sql(
            suite.database_url,
            "SELECT id, trace_context FROM jobs WHERE id = ANY(%s::uuid[])",
            [n.rsplit("/", 1)[1] for n in names],
        )
    }

    def creates() -> list[Span] | None:
        found = [
            s
            for s in all_spans(suite)
            if s["name"] == "gnomon.job.create" and s["attrs"]["gnomon.job"] in names
        ]
        return found if len(found) == 3 else None

    spans = wait_for(creates, 30, "3 create spans")
    assert {(s["trace"], s["parent"]) for s in spans} == {(f"0x{trace_id}", f"0x{caller}")}
    for s in spans:  # each job stores its own create span's context, the caller's tracestate kept
        job_id = s["attrs"]["gnomon.job"].rsplit("/", 1)[1]
        assert stored[job_id] == f"00-{trace_id}-{s['id'][2:]}-01\nshop=1"


def test_a_triggered_occurrence_is_a_child_of_the_callers_span(suite):
    _app_provider()
    app = trace.get_tracer("test.app")
    later = datetime(2099, 1, 1, tzinfo=UTC)  # no planned occurrence before the test ends
    with Client(api=suite.api_address) as c:
        sched = c.create_schedule("tr-trigger", every=3600, start_time=later, schedule_id="triggered")
        try:
            with app.start_as_current_span("user.trigger") as request:
                _, job = c.trigger_schedule(sched.name)
        finally:
            c.delete_schedule(sched.name)
    assert job is not None
    ctx = request.get_span_context()
    spans = job_trace(suite, job.name, set())
    create = one(spans, "gnomon.job.create")
    assert (create["trace"], create["parent"]) == (_hex(ctx.trace_id, 32), _hex(ctx.span_id, 16))
    assert create["attrs"]["gnomon.schedule"] == sched.name and create["service"] == "gnomon-api"
