"""DeadLetterService over real gRPC against a real PostgreSQL: list, paced and idempotent replay,
dry runs, the audit log, limits, authorization.

Dead letters are made the way production makes them: jobs inserted through the storage API, then
claimed under a fencing token, accepted by a worker and completed with a failure that leaves no
retry (``dispatch.claim_due`` / ``accept`` / ``complete``).
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import timestamp_pb2
from sqlalchemy import func, select, update

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as pb_grpc
from gnomon._proto.gnomon.v1 import job_pb2
from gnomon.api.dead_letter_servicer import DeadLetterServicer, _fingerprint
from gnomon.cli.main import app as cli
from gnomon.common.domain import jobs as domain_jobs
from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import dead_letters as dlq
from gnomon.common.storage import fencing as fencing_store
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import audit_log, dlq_replays, jobs
from gnomon_test_support import (
    decode,
    job_service,
    new_job_spec,
    open_engine,
    own_shards,
    serving,
    wait_until,
)

TOKEN = 7
SHARDS = 64


@pytest.fixture
async def api(engine):
    async for stub, _, _ in _serve(engine):
        yield stub, engine


@pytest.fixture
async def api_address(engine):
    async for x in _serve(engine):
        yield x


@pytest.fixture
async def crdb_api(db_url):
    """The same servicer through the production ``cockroachdb+psycopg`` dialect (which also runs
    against PostgreSQL), so every DLQ statement compiles for it."""
    engine = open_engine(db_url, "cockroachdb")
    try:
        async for stub, _, _ in _serve(engine):
            yield stub, engine
    finally:
        await engine.dispose()


async def _serve(engine):
    await own_shards(engine, TOKEN, owner="test")
    async with serving(
        (
            pb_grpc.add_DeadLetterServiceServicer_to_server,
            DeadLetterServicer(engine, shards=SHARDS),
            "gnomon.v1.DeadLetterService",
        ),
        job_service(engine, SHARDS),  # GetJob, for the CLI's progress display
    ) as (channel, address):
        yield pb_grpc.DeadLetterServiceStub(channel), engine, address


async def make_dead(
    engine,
    n: int,
    *,
    namespace="default",
    queue="q",
    failure_class="PERMANENT",
    error="boom",
    max_attempts=3,
    idempotent=False,
    payload=b"p",
) -> list[uuid.UUID]:
    """n jobs -> claimed (fenced), accepted by worker w1, failed with ``failure_class`` -> DEAD."""
    batch = []
    for i in range(n):
        jid = uuid.uuid4()
        batch.append(
            new_job_spec(
                id=jid,
                namespace=namespace,
                queue=queue,
                payload=payload + str(i).encode(),
                max_attempts=max_attempts,
                idempotency_key=f"key-{jid}",
                lease=timedelta(seconds=45),
                idempotent=idempotent,
            )
        )
    await run_transaction(engine, lambda c: jobs_store.insert_jobs(c, batch))
    ids = {b.id for b in batch}
    claimed = await run_transaction(
        engine,
        lambda c: claim_store.claim_due(
            c,
            region="local",
            tokens={0: TOKEN},
            targets=[(namespace, queue)],
            limit=n + 10,
            dispatcher_id="d1",
        ),
    )
    keys = [AttemptKey(c.job_id, c.attempt, c.version, c.token) for c in claimed if c.job_id in ids]
    assert len(keys) == n
    await run_transaction(engine, lambda c: lease_store.accept(c, keys, "w1"))
    results = [Result(k, succeeded=False, failure_class=failure_class, error=error) for k in keys]
    await run_transaction(engine, lambda c: result_store.complete(c, results, retry_delay_s=lambda r, a: 0))
    async with engine.connect() as c:
        states = (await c.execute(select(jobs.c.state).where(jobs.c.id.in_(list(ids))))).scalars().all()
    assert set(states) == {"DEAD"}, states
    return [b.id for b in batch]


async def count(engine, table, *where) -> int:
    async with engine.connect() as c:
        return (await c.execute(select(func.count()).select_from(table).where(*where))).scalar_one()


async def rows(engine, q):
    async with engine.connect() as c:
        return [dict(r) for r in (await c.execute(q)).mappings()]


async def db_now(engine) -> datetime:
    async with engine.connect() as c:
        return (await c.execute(select(func.now()))).scalar_one()


def ts(dt: datetime) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromDatetime(dt)
    return t


def replay_req(**kw) -> pb.ReplayDeadLettersRequest:
    base = dict(max_rate=100, max_jobs=1000, reason="fixed the bug", request_id=str(uuid.uuid4()))
    base.update(kw)
    return pb.ReplayDeadLettersRequest(**base)


async def test_list_filters_by_queue_class_error_and_time_and_pages(api):
    stub, engine = api
    a = await make_dead(engine, 3, queue="a", error="boom: disk full (100%)")
    b = await make_dead(
        engine, 2, queue="b", failure_class="TRANSIENT", error="Timeout talking to billing", max_attempts=1
    )
    await make_dead(engine, 1, namespace="other", queue="a")
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    async with engine.begin() as c:  # spread the finish times: a[i] at t0+i h, b[i] at t0+10+i h
        for i, jid in enumerate(a + b):
            await c.execute(
                update(jobs)
                .where(jobs.c.id == jid)
                .values(finished_at=t0 + timedelta(hours=i if i < 3 else 10 + i))
            )

    async def names(**kw) -> list[str]:
        r = await stub.ListDeadLetters(pb.ListDeadLettersRequest(page_size=1000, **kw))
        return [d.job.name.rsplit("/", 1)[1] for d in r.dead_letters]

    everything = await names()
    assert everything == [str(j) for j in reversed(a + b)]  # most recently finished first
    assert await names(queue="a") == [str(j) for j in reversed(a)]
    assert await names(failure_class="TRANSIENT") == [str(j) for j in reversed(b)]
    assert await names(error_contains="TIMEOUT talking") == [str(j) for j in reversed(b)]  # case-insensitive
    assert await names(error_contains="(100%)") == [str(j) for j in reversed(a)]  # % is literal
    assert await names(error_contains="100_%") == []
    assert await names(start_time=ts(t0 + timedelta(hours=1)), end_time=ts(t0 + timedelta(hours=3))) == [
        str(a[2]),
        str(a[1]),
    ]  # [start, end)
    assert await names(parent="namespaces/other") and len(await names(parent="namespaces/other")) == 1

    d = (await stub.ListDeadLetters(pb.ListDeadLettersRequest(queue="b", page_size=1))).dead_letters[0]
    assert d.job.state == job_pb2.JOB_STATE_DEAD and d.job.failure_class == "TRANSIENT"
    assert d.job.last_error == "Timeout talking to billing" and not d.replayed_by and not d.replay_of
    [att] = d.attempts
    assert (att.attempt, att.state, att.failure_class, att.error, att.worker_id, att.fencing_token) == (
        1,
        "FAILED",
        "TRANSIENT",
        "Timeout talking to billing",
        "w1",
        TOKEN,
    )
    assert att.HasField("claim_time") and att.HasField("start_time") and att.HasField("finish_time")

    seen, token, pages = [], "", 0
    while True:
        r = await stub.ListDeadLetters(pb.ListDeadLettersRequest(page_size=2, page_token=token))
        seen += [x.job.name for x in r.dead_letters]
        pages += 1
        token = r.next_page_token
        if not token:
            break
    assert pages == 3 and len(seen) == 5 and len(set(seen)) == 5
    r = await stub.ListDeadLetters(pb.ListDeadLettersRequest(page_size=2))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ListDeadLetters(
            pb.ListDeadLettersRequest(queue="a", page_size=2, page_token=r.next_page_token)
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in decode(e.value)[2].field_violations] == ["page_token"]


async def test_replay_of_1000_dead_jobs_at_100_per_second_is_paced_linked_and_idempotent(api):
    stub, engine = api
    dead = await make_dead(engine, 1000, queue="pay", error="card declined", idempotent=True)
    before = await db_now(engine)
    total = await count(engine, jobs)
    rid = str(uuid.uuid4())
    req = replay_req(queue="pay", max_rate=100, max_jobs=100000, request_id=rid)
    r = await stub.ReplayDeadLetters(req)
    assert (r.matched_count, r.replayed_count, len(r.replayed_jobs), r.dry_run) == (1000, 1000, 1000, False)
    assert await count(engine, jobs) == total + 1000

    new = await rows(engine, select(jobs).where(jobs.c.replay_of.is_not(None)).order_by(jobs.c.scheduled_at))
    assert len(new) == 1000
    assert [f"namespaces/default/jobs/{j['id']}" for j in new] == list(r.replayed_jobs)  # schedule order
    times = [j["scheduled_at"] for j in new]
    assert all(t >= before for t in times)  # each one at or after "now" (DB clock)
    span = (times[-1] - times[0]).total_seconds()
    assert 9.9 <= span <= 10.0, span  # ~10 s, not less
    gaps = {round((b - a).total_seconds(), 4) for a, b in zip(times, times[1:])}
    assert gaps == {0.01}, gaps  # evenly paced across both batches of 500
    started = (await rows(engine, select(dlq_replays)))[0]["created_at"]
    assert times[0] >= started and times[0] - started < timedelta(seconds=5)

    originals = {j["id"]: j for j in await rows(engine, select(jobs).where(jobs.c.id.in_(dead)))}
    assert {o["state"] for o in originals.values()} == {"DEAD"}
    for j in new:
        o = originals[j["replay_of"]]
        assert o["replayed_by"] == j["id"]
        assert (j["state"], j["attempt"], j["version"], j["deadline"], j["replayed_by"]) == (
            "SCHEDULED",
            0,
            1,
            None,
            None,
        )
        assert {
            "namespace",
            "region",
            "queue",
            "payload",
            "idempotency_key",
            "max_attempts",
            "lease_ms",
            "idempotent",
        } <= set(dlq.REPLAY_COPY_COLUMNS)
        for col in dlq.REPLAY_COPY_COLUMNS:
            assert j[col] == o[col], col
        assert all(j[c] is None for c in ("last_error", "failure_class", "finished_at", "dispatched_at"))
        assert j["id"] != o["id"] and j["shard"] == domain_jobs.shard_of(j["id"], SHARDS)

    # the same request again: nothing more is replayed, the same answer comes back, no new audit entry
    again = await stub.ReplayDeadLetters(req)
    assert (again.matched_count, again.replayed_count, list(again.replayed_jobs)) == (
        1000,
        1000,
        list(r.replayed_jobs),
    )
    assert await count(engine, jobs) == total + 1000
    assert await count(engine, audit_log) == 1
    # a different reason is still the same request
    again = await stub.ReplayDeadLetters(
        replay_req(queue="pay", max_rate=100, max_jobs=100000, request_id=rid, reason="retrying the call")
    )
    assert again.replayed_count == 1000 and await count(engine, jobs) == total + 1000
    # the same request_id with another filter or rate is refused
    for other in (
        replay_req(queue="other", max_rate=100, max_jobs=100000, request_id=rid),
        replay_req(queue="pay", max_rate=50, max_jobs=100000, request_id=rid),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.ReplayDeadLetters(other)
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert decode(e.value)[1].reason == "REQUEST_ID_REUSED"
    assert await count(engine, jobs) == total + 1000

    # replayed dead letters leave the default listing; include_replayed shows them with their link
    assert len((await stub.ListDeadLetters(pb.ListDeadLettersRequest(queue="pay"))).dead_letters) == 0
    shown = (
        await stub.ListDeadLetters(pb.ListDeadLettersRequest(queue="pay", include_replayed=True, page_size=5))
    ).dead_letters
    assert len(shown) == 5 and all(d.replayed_by.startswith("namespaces/default/jobs/") for d in shown)
    # a new request finds nothing left to replay
    r2 = await stub.ReplayDeadLetters(replay_req(queue="pay"))
    assert (r2.matched_count, r2.replayed_count) == (0, 0) and await count(engine, jobs) == total + 1000


async def test_dry_run_writes_no_job_but_an_audit_entry_with_actor_reason_request_id_and_filter(api):
    stub, engine = api
    await make_dead(engine, 4, queue="mail", failure_class="PERMANENT")
    total = await count(engine, jobs)
    rid = str(uuid.uuid4())
    md = (("x-gnomon-actor", "alice@example.com"),)
    r = await stub.ReplayDeadLetters(
        replay_req(
            queue="mail",
            failure_class="PERMANENT",
            dry_run=True,
            max_jobs=3,
            request_id=rid,
            reason="checking the blast radius",
        ),
        metadata=md,
    )
    assert (r.matched_count, r.replayed_count, list(r.replayed_jobs), r.dry_run) == (4, 0, [], True)
    assert await count(engine, jobs) == total
    assert await count(engine, jobs, jobs.c.replayed_by.is_not(None)) == 0
    assert await count(engine, dlq_replays) == 0

    [entry] = (await stub.ListAuditEntries(pb.ListAuditEntriesRequest())).audit_entries
    assert entry.action == "dead_letters.replay.dry_run" and entry.reason == "checking the blast radius"
    assert entry.request_id == rid and entry.name.startswith("namespaces/default/auditEntries/")
    assert entry.actor.startswith("alice@example.com (") and "127.0.0.1" in entry.actor
    assert abs((entry.create_time.ToDatetime(tzinfo=UTC) - await db_now(engine)).total_seconds()) < 60
    details = json.loads(entry.details)
    assert details["filter"] == {
        "queue": "mail",
        "failure_class": "PERMANENT",
        "error_contains": None,
        "start_time": None,
        "end_time": None,
    }
    assert (details["matched_count"], details["replay_count"], details["max_jobs"], details["max_rate"]) == (
        4,
        3,
        3,
        100,
    )
    assert details["actor_header"] == "alice@example.com" and "127.0.0.1" in details["peer"]

    # the real replay after the dry run (same request_id is fine: a dry run records no replay)
    r = await stub.ReplayDeadLetters(
        replay_req(queue="mail", failure_class="PERMANENT", max_jobs=3, request_id=rid, reason="go"),
        metadata=md,
    )
    assert r.replayed_count == 3
    entries = (await stub.ListAuditEntries(pb.ListAuditEntriesRequest(page_size=1))).audit_entries
    assert entries[0].action == "dead_letters.replay" and entries[0].reason == "go"
    page2 = await stub.ListAuditEntries(
        pb.ListAuditEntriesRequest(
            page_size=1,
            page_token=(await stub.ListAuditEntries(pb.ListAuditEntriesRequest(page_size=1))).next_page_token,
        )
    )
    assert [e.action for e in page2.audit_entries] == [
        "dead_letters.replay.dry_run"
    ] and not page2.next_page_token


async def test_max_jobs_caps_the_replay_oldest_first(api):
    stub, engine = api
    dead = await make_dead(engine, 10, queue="q")
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    async with engine.begin() as c:
        for i, jid in enumerate(dead):
            await c.execute(
                update(jobs).where(jobs.c.id == jid).values(finished_at=t0 - timedelta(minutes=10 - i))
            )
    r = await stub.ReplayDeadLetters(replay_req(max_jobs=3))
    assert (r.matched_count, r.replayed_count, len(r.replayed_jobs)) == (10, 3, 3)
    replayed = {
        j["replay_of"]
        for j in await rows(engine, select(jobs.c.replay_of).where(jobs.c.replay_of.is_not(None)))
    }
    assert replayed == set(dead[:3])
    r = await stub.ReplayDeadLetters(replay_req(max_jobs=100))
    assert (r.matched_count, r.replayed_count) == (7, 7)
    assert await count(engine, jobs, jobs.c.replay_of.is_not(None)) == 10


async def test_an_interrupted_replay_resumes_with_the_same_request_id_and_keeps_the_pace(api):
    stub, engine = api
    await make_dead(engine, 5)
    rid = str(uuid.uuid4())
    req = replay_req(max_rate=10, max_jobs=5, request_id=rid)
    spec = dlq.ReplayRequest(
        filter=dlq.DeadLetterFilter(namespace="default"),
        max_rate=10,
        max_jobs=5,
        dry_run=False,
        reason="x",
        request_id=uuid.UUID(rid),
        request_hash=_fingerprint(req, "parent", "reason", "request_id"),
        actor="test",
    )
    # as if the API died after the first batch of 2
    await run_transaction(engine, lambda c: dlq.start_replay(c, spec))
    out = await run_transaction(engine, lambda c: dlq.replay_batch(c, spec, shards=SHARDS, batch=2))
    assert (out.replayed, out.done) == (2, False)
    r = await stub.ReplayDeadLetters(req)
    assert (r.matched_count, r.replayed_count, len(r.replayed_jobs)) == (5, 5, 5)
    times = [
        j["scheduled_at"]
        for j in await rows(
            engine,
            select(jobs.c.scheduled_at).where(jobs.c.replay_of.is_not(None)).order_by(jobs.c.scheduled_at),
        )
    ]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    assert len(times) == 5 and all(g >= 0.1 - 1e-6 for g in gaps), gaps
    assert await count(engine, audit_log) == 1


BAD = [
    ("max_rate 0", dict(max_rate=0), "max_rate"),
    ("max_rate negative", dict(max_rate=-5), "max_rate"),
    ("max_rate over 1000", dict(max_rate=1000.5), "max_rate"),
    ("max_rate nan", dict(max_rate=math.nan), "max_rate"),
    ("max_jobs 0", dict(max_jobs=0), "max_jobs"),
    ("max_jobs over 100000", dict(max_jobs=100001), "max_jobs"),
    ("reason missing", dict(reason=""), "reason"),
    ("reason blank", dict(reason="   "), "reason"),
    ("reason too long", dict(reason="x" * 1001), "reason"),
    ("request_id missing", dict(request_id=""), "request_id"),
    ("request_id malformed", dict(request_id="not-a-uuid"), "request_id"),
    ("queue syntax", dict(queue="Bad Queue"), "queue"),
    ("failure_class syntax", dict(failure_class="permanent"), "failure_class"),
    ("error_contains too long", dict(error_contains="e" * 1001), "error_contains"),
    ("start_time out of range", dict(start_time=timestamp_pb2.Timestamp(seconds=-1)), "start_time"),
    (
        "end_time before start_time",
        dict(
            start_time=timestamp_pb2.Timestamp(seconds=2_000_000_000),
            end_time=timestamp_pb2.Timestamp(seconds=1_000_000_000),
        ),
        "end_time",
    ),
    ("parent", dict(parent="tenants/x"), "parent"),
]


@pytest.mark.parametrize("label,fields,field", BAD, ids=[b[0] for b in BAD])
async def test_bad_replay_input_is_invalid_argument_and_writes_nothing(api, label, fields, field):
    stub, engine = api
    await make_dead(engine, 2)
    total = await count(engine, jobs)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ReplayDeadLetters(replay_req(**fields))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status, info, bad = decode(e.value)
    assert info.reason == "INVALID_FIELD" and [v.field for v in bad.field_violations] == [field]
    assert "Traceback" not in e.value.details()
    assert await count(engine, jobs) == total
    assert await count(engine, jobs, jobs.c.replayed_by.is_not(None)) == 0
    assert await count(engine, audit_log) == 0 and await count(engine, dlq_replays) == 0


async def test_list_bad_page_size_and_every_violation_reported_together(api):
    stub, _ = api
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ListDeadLetters(
            pb.ListDeadLettersRequest(page_size=1001, queue="Q!", page_token="garbage")
        )
    assert [v.field for v in decode(e.value)[2].field_violations] == ["queue", "page_size", "page_token"]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ReplayDeadLetters(pb.ReplayDeadLettersRequest())
    assert [v.field for v in decode(e.value)[2].field_violations] == [
        "max_rate",
        "max_jobs",
        "reason",
        "request_id",
    ]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await stub.ListAuditEntries(pb.ListAuditEntriesRequest(page_size=-1))
    assert [v.field for v in decode(e.value)[2].field_violations] == ["page_size"]


async def test_namespace_outside_x_gnomon_namespaces_is_permission_denied(api):
    stub, engine = api
    await make_dead(engine, 2, namespace="acme")
    await make_dead(engine, 2, namespace="evil")
    total = await count(engine, jobs)
    md = (("x-gnomon-namespaces", "acme, other"), ("x-gnomon-actor", "bob"))
    calls = [
        (stub.ReplayDeadLetters, replay_req(parent="namespaces/evil")),
        (stub.ReplayDeadLetters, replay_req(parent="namespaces/evil", dry_run=True)),
        (stub.ListDeadLetters, pb.ListDeadLettersRequest(parent="namespaces/evil")),
        (stub.ListAuditEntries, pb.ListAuditEntriesRequest(parent="namespaces/evil")),
        (stub.ReplayDeadLetters, replay_req()),
    ]  # empty parent = default, not allowed
    for method, req in calls:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await method(req, metadata=md)
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert decode(e.value)[1].reason == "NAMESPACE_NOT_ALLOWED"
    assert await count(engine, jobs) == total and await count(engine, audit_log) == 0
    r = await stub.ReplayDeadLetters(replay_req(parent="namespaces/acme"), metadata=md)
    assert r.replayed_count == 2
    assert await count(engine, jobs, jobs.c.replay_of.is_not(None), jobs.c.namespace == "acme") == 2
    assert await count(engine, jobs, jobs.c.replayed_by.is_not(None), jobs.c.namespace == "evil") == 0
    [entry] = (
        await stub.ListAuditEntries(pb.ListAuditEntriesRequest(parent="namespaces/acme"), metadata=md)
    ).audit_entries
    assert entry.actor.startswith("bob (")
    assert not (
        await stub.ListAuditEntries(pb.ListAuditEntriesRequest(parent="namespaces/evil"))
    ).audit_entries


async def test_a_replay_that_dies_again_is_a_new_dead_letter_linked_to_the_first(api):
    stub, engine = api
    [first] = await make_dead(engine, 1, queue="q", error="first death")
    r = await stub.ReplayDeadLetters(replay_req())
    new_id = uuid.UUID(r.replayed_jobs[0].rsplit("/", 1)[1])
    shard = domain_jobs.shard_of(new_id, SHARDS)
    if shard != 0:
        await run_transaction(
            engine, lambda c: fencing_store.record_ownership(c, "local", shard, TOKEN, "test")
        )
    claimed = await run_transaction(
        engine,
        lambda c: claim_store.claim_due(
            c, region="local", tokens={shard: TOKEN}, targets=[("default", "q")], limit=10, dispatcher_id="d1"
        ),
    )
    [c1] = [c for c in claimed if c.job_id == new_id]  # due at once (first of the replay)
    key = AttemptKey(c1.job_id, c1.attempt, c1.version, c1.token)
    await run_transaction(engine, lambda c: lease_store.accept(c, [key], "w2"))
    await run_transaction(
        engine,
        lambda c: result_store.complete(
            c,
            [Result(key, succeeded=False, failure_class="PERMANENT", error="second death")],
            retry_delay_s=lambda r, a: 0,
        ),
    )
    [d] = (await stub.ListDeadLetters(pb.ListDeadLettersRequest())).dead_letters
    assert d.job.name.endswith(str(new_id)) and d.replay_of == f"namespaces/default/jobs/{first}"
    assert [a.error for a in d.attempts] == ["second death"]


async def test_every_dlq_statement_runs_through_the_cockroachdb_dialect(crdb_api):
    stub, engine = crdb_api
    await make_dead(engine, 3, queue="c", error="Gateway timeout")
    filt = dict(
        queue="c",
        failure_class="PERMANENT",
        error_contains="TIMEOUT",
        start_time=ts(datetime(2000, 1, 1, tzinfo=UTC)),
        end_time=ts(datetime(2100, 1, 1, tzinfo=UTC)),
    )
    r = await stub.ListDeadLetters(pb.ListDeadLettersRequest(page_size=2, **filt))
    assert len(r.dead_letters) == 2 and r.next_page_token and len(r.dead_letters[0].attempts) == 1
    r2 = await stub.ListDeadLetters(
        pb.ListDeadLettersRequest(page_size=2, page_token=r.next_page_token, **filt)
    )
    assert len(r2.dead_letters) == 1
    assert (await stub.ReplayDeadLetters(replay_req(queue="c", dry_run=True))).matched_count == 3
    spec_req = replay_req(queue="c", max_rate=1000, max_jobs=3)
    out = await stub.ReplayDeadLetters(spec_req)
    assert (out.matched_count, out.replayed_count) == (3, 3)
    assert (await stub.ReplayDeadLetters(spec_req)).replayed_jobs == out.replayed_jobs
    assert len((await stub.ListAuditEntries(pb.ListAuditEntriesRequest())).audit_entries) == 2


async def test_sdk_and_cli_list_replay_follow_and_audit(api_address):
    """The CLI and the sync SDK client (run in a thread: the server lives in this event loop)."""
    from typer.testing import CliRunner

    from gnomon.sdk import Client, GnomonError

    _, engine, address = api_address
    await make_dead(engine, 3, queue="cli", error="bad row")
    runner = CliRunner()

    def run(*args):
        return runner.invoke(cli, ["dlq", *args, "--api", address])

    r = await asyncio.to_thread(run, "list", "--queue", "cli", "--json")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 3 and all(
        x["state"] == "DEAD" and x["attempts"][0]["error"] == "bad row" for x in lines
    )

    r = await asyncio.to_thread(
        run, "replay", "--queue", "cli", "--max-rate", "0", "--max-jobs", "5", "--reason", "x"
    )
    assert r.exit_code == 1 and "max_rate" in r.stderr

    async def finish_replays():  # plays the dispatcher and worker for the progress display
        async def replayed() -> bool:
            return await count(engine, jobs, jobs.c.replay_of.is_not(None)) >= 3

        await wait_until(replayed, 30, "3 replay jobs", interval_s=0.05)
        await asyncio.sleep(0.5)  # the behaviour played: the jobs take a while, so the display shows progress
        async with engine.begin() as c:
            await c.execute(
                update(jobs)
                .where(jobs.c.replay_of.is_not(None))
                .values(state="SUCCEEDED", dispatched_at=func.now(), finished_at=func.now())
            )

    finisher = asyncio.create_task(finish_replays())
    r = await asyncio.wait_for(
        asyncio.to_thread(
            run,
            "replay",
            "--queue",
            "cli",
            "--class",
            "permanent",
            "--max-rate",
            "1000",
            "--max-jobs",
            "10",
            "--reason",
            "fixed the parser",
            "--actor",
            "carol",
        ),
        timeout=30,
    )
    await finisher
    assert r.exit_code == 0, r.output
    out = r.stdout.splitlines()
    assert out[0].startswith("matched 3, replayed 3 (request_id ")
    assert out[-1] == "replayed 3/3 dispatched, 3 finished"
    assert all(x.startswith("replayed ") and x.endswith(" finished") for x in out[1:])

    r = await asyncio.to_thread(run, "audit", "--json")
    [entry] = [json.loads(x) for x in r.stdout.splitlines()]
    assert entry["actor"].startswith("carol (") and entry["reason"] == "fixed the parser"
    assert entry["details"]["filter"]["failure_class"] == "PERMANENT"

    def sdk():
        with Client(api=address, metadata=[("x-gnomon-actor", "dave")]) as c:
            listed = list(c.list_dead_letters(queue="cli", include_replayed=True, page_size=2))
            dry = c.replay_dead_letters(max_rate=5, max_jobs=10, reason="again?", dry_run=True)
            entries = list(c.list_audit_entries(page_size=1))
            try:
                c.replay_dead_letters(max_rate=5, max_jobs=0, reason="")
            except GnomonError as e:
                bad = e
            return listed, dry, entries, bad

    listed, dry, entries, bad = await asyncio.to_thread(sdk)
    assert len(listed) == 3 and all(d.replayed_by and d.attempts[0].worker_id == "w1" for d in listed)
    assert (dry.matched, dry.replayed, dry.dry_run) == (0, 0, True) and uuid.UUID(dry.request_id)
    assert [e.actor.split(" ")[0] for e in entries] == ["dave", "carol"]
    assert entries[0].action == "dead_letters.replay.dry_run" and entries[0].details["max_rate"] == 5
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in bad.field_violations] == ["max_jobs", "reason"]
