"""The tracing hooks of the API and the dispatcher without processes (docs/tracing.md): with tracing
off (the default) nothing is traced, even for a job with a stored context; with it on, the
dispatcher's spans of one attempt hang off the job's stored context and the assignment carries the
delivery's context."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gnomon.common import tracing
from gnomon.common.domain.attempts import Claimed, Reaped, Result
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.jobs import NewJob
from gnomon.common.domain.states import JobState
from gnomon.common.tracing_settings import TracesSettings
from gnomon.dispatcher import tracing as dispatch_tracing
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.reaper.sweeps import lost_spans

STORED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def exporter(monkeypatch) -> InMemorySpanExporter:
    """Gnomon's tracer replaced by one that records into memory (tracing still off)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    monkeypatch.setattr(tracing, "_TRACER", provider.get_tracer("test"))
    return memory


def claimed(trace_context: str | None, attempt: int = 1) -> Claimed:
    return Claimed(
        job_id=uuid.uuid4(),
        namespace="ns",
        shard=0,
        queue="q",
        payload=b"",
        version=2,
        attempt=attempt,
        token=7,
        idempotency_key="k",
        scheduled_at=NOW,
        deadline=None,
        max_attempts=3,
        lease_ms=30_000,
        lease_expires_at=NOW + timedelta(seconds=30),
        dispatched_at=NOW,
        trace_context=trace_context,
    )


def deliver(items: list[Claimed]):
    """Delivers ``items`` through a relay to one worker stream; returns the assignments it sent."""
    registry = SessionRegistry()
    session = registry.add("w1", "ns", ["q"], credits=10)
    relay = Relay(None, registry, None, region="local", interval_s=1.0, batch=10)  # type: ignore[arg-type]
    assert relay.deliver(items) == len(items)
    return list(session.out.get_nowait().assignments.assignments)


def new_job() -> NewJob:
    return NewJob(
        id=uuid.uuid4(),
        namespace="ns",
        region="local",
        shard=0,
        queue="q",
        payload=b"",
        schedule_at=None,
        delay=None,
        deadline=None,
        max_attempts=3,
        idempotency_key="",
        lease=timedelta(seconds=30),
        request_id=None,
        request_hash=None,
    )


def test_tracing_off_adds_no_context_and_makes_no_span(exporter):
    assert tracing.ENABLED is False  # the default: GNOMON_TRACES_EXPORTER=none
    jobs = [new_job()]
    with tracing.creating([("traceparent", STORED)], jobs) as created:
        assert created is jobs and created[0].trace_context is None
    # even a job that has a stored context (traced by an API with tracing on) gets none here
    sent = deliver([claimed(None), claimed(STORED)])
    assert [dict(a.trace_context) for a in sent] == [{}, {}]
    assert exporter.get_finished_spans() == ()


def test_tracing_on_one_attempt_hangs_off_the_stored_context(exporter, monkeypatch):
    monkeypatch.setattr(tracing, "ENABLED", True)
    traced, plain = claimed(STORED), claimed(None)
    dispatch_tracing.claimed([traced, plain], start_ns=1, dispatcher_id="d1")
    traced_a, plain_a = deliver([traced, plain])
    assert dict(plain_a.trace_context) == {}  # a job without a stored context stays untraced
    dispatch_tracing.accepted(traced, "w1", start_ns=2, ok=True)
    failure = Result(key=traced.key, succeeded=False, failure_class=FailureClass.TRANSIENT, error="boom")
    dispatch_tracing.finished(traced, failure, "w1", start_ns=3, reason="")

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["gnomon.accept", "gnomon.claim", "gnomon.deliver", "gnomon.result"]
    claim, deliver_span = spans["gnomon.claim"], spans["gnomon.deliver"]
    assert f"{claim.context.trace_id:032x}" == STORED.split("-")[1]
    assert claim.parent is not None and f"{claim.parent.span_id:016x}" == STORED.split("-")[2]
    assert deliver_span.parent is not None and deliver_span.parent.span_id == claim.context.span_id
    for name in ("gnomon.accept", "gnomon.result"):
        parent = spans[name].parent
        assert parent is not None and parent.span_id == deliver_span.context.span_id
    wire = dict(traced_a.trace_context)
    assert wire["traceparent"] == f"00-{STORED.split('-')[1]}-{deliver_span.context.span_id:016x}-01"
    result = spans["gnomon.result"]
    assert result.attributes is not None
    assert (result.attributes["gnomon.outcome"], result.attributes["gnomon.failure_class"]) == (
        "FAILED",
        "TRANSIENT",
    )
    assert result.attributes["gnomon.attempt"] == 1 and result.attributes["gnomon.fencing_token"] == 7
    assert claim.start_time == 1


def test_tracing_on_create_continues_the_callers_traceparent(exporter, monkeypatch):
    monkeypatch.setattr(tracing, "ENABLED", True)
    with tracing.creating([("traceparent", STORED), ("tracestate", "k=v")], [new_job()]) as (job,):
        stored = job.trace_context
    [span] = exporter.get_finished_spans()
    assert span.name == "gnomon.job.create" and span.parent is not None
    assert f"{span.parent.span_id:016x}" == STORED.split("-")[2]
    assert tracing.decode(stored) == {
        "traceparent": f"00-{STORED.split('-')[1]}-{span.context.span_id:016x}-01",
        "tracestate": "k=v",
    }
    assert tracing.encode(tracing.decode(stored)) == stored


def test_a_lost_lease_is_a_span_of_the_jobs_trace(exporter):
    job = uuid.uuid4()
    lost_spans(
        [
            Reaped(job, 2, JobState.SCHEDULED, "ns", "q", "lease expired", STORED),
            Reaped(uuid.uuid4(), 1, JobState.DEAD, "ns", "q", "lease expired", None),  # not traced
        ]
    )
    [span] = exporter.get_finished_spans()
    assert span.name == "gnomon.lease_lost" and span.parent is not None
    assert f"{span.context.trace_id:032x}" == STORED.split("-")[1]
    assert span.attributes is not None and span.attributes["gnomon.job"] == f"namespaces/ns/jobs/{job}"
    assert (span.attributes["gnomon.attempt"], span.attributes["gnomon.new_state"]) == (2, "SCHEDULED")
    assert span.status.status_code.name == "ERROR" and span.status.description == "lease expired"


def test_the_file_exporter_appends_one_json_span_a_line_from_several_writers(tmp_path):
    path = tmp_path / "traces.jsonl"
    tracer = TracerProvider().get_tracer("test")
    first, second = (tracing.JsonLinesFileExporter(str(path)) for _ in range(2))
    spans = []
    for name in ("a", "b", "c"):
        span = tracer.start_span(name)
        span.end()
        spans.append(span)
    assert first.export(spans[:2]).name == "SUCCESS" and second.export(spans[2:]).name == "SUCCESS"
    first.shutdown()
    assert first.export(spans).name == "FAILURE"  # shut down: nothing written
    second.shutdown()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["a", "b", "c"]


def test_an_exporter_without_its_destination_is_refused(monkeypatch):
    monkeypatch.delenv("GNOMON_OTLP_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="GNOMON_TRACES_FILE"):
        tracing.setup("api", TracesSettings(exporter="file"))
    with pytest.raises(ValueError, match="GNOMON_OTLP_ENDPOINT"):
        tracing.setup("api", TracesSettings(exporter="otlp"))
    assert tracing.setup("api", TracesSettings()) is False and tracing.ENABLED is False
