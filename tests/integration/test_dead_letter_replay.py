"""ReplayDeadLetters over real gRPC against a real PostgreSQL: paced, linked and idempotent replay,
dry runs and the audit log, the max_jobs cap, resuming an interrupted replay, invalid input, and a
replay that dies again.

Dead letters are made with gnomon_dlq_support.make_dead (as production makes them); the servicer is
the ``api`` fixture of conftest.py. Listing, authorization and the CLI/SDK are in test_dead_letters.py.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import timestamp_pb2
from sqlalchemy import select, update

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon._proto.gnomon.v1.failure_class_pb2 import FAILURE_CLASS_PERMANENT
from gnomon.api.validation import request_fingerprint
from gnomon.common.domain import jobs as domain_jobs
from gnomon.common.domain.attempts import AttemptKey, Result
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import dead_letters as dlq
from gnomon.common.storage import fencing as fencing_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.schema import audit_log, dlq_replays, jobs
from gnomon_dlq_support import SHARDS, TOKEN, count, db_now, make_dead, replay_req, rows
from gnomon_test_support import decode, fenced


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
            failure_class=FAILURE_CLASS_PERMANENT,
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
    # the authenticated principal ("insecure" on this test server), never the claimed x-gnomon-actor
    assert entry.actor == "insecure" and "127.0.0.1" in json.loads(entry.details)["peer"]
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
    assert details["principal_kind"] == "insecure" and "actor_header" not in details

    # the real replay after the dry run (same request_id is fine: a dry run records no replay)
    r = await stub.ReplayDeadLetters(
        replay_req(
            queue="mail", failure_class=FAILURE_CLASS_PERMANENT, max_jobs=3, request_id=rid, reason="go"
        ),
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
        request_hash=request_fingerprint(req, "parent", "reason", "request_id"),
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
    ("failure_class not a class", dict(failure_class=99), "failure_class"),
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
    claimed = await fenced(
        engine,
        {shard: TOKEN},
        lambda fx: claim_store.claim_due(fx, targets=[("default", "q")], limit=10, dispatcher_id="d1"),
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
