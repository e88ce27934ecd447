"""DeadLetterService over real gRPC against a real PostgreSQL: listing and its filters and pages,
every violation reported together, namespace authorization, every statement through the
cockroachdb dialect, and the CLI and SDK (list, replay with progress, audit).

Dead letters are made the way production makes them (gnomon_dlq_support.make_dead): jobs inserted
through the storage API, then claimed under a fencing token, accepted by a worker and completed with
a failure that leaves no retry. The servicer is served by the ``api``, ``api_address`` and
``crdb_api`` fixtures of conftest.py. Replay itself is in test_dead_letter_replay.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from sqlalchemy import func, update

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as pb
from gnomon._proto.gnomon.v1 import job_pb2
from gnomon._proto.gnomon.v1.failure_class_pb2 import FAILURE_CLASS_PERMANENT, FAILURE_CLASS_TRANSIENT
from gnomon.cli.main import app as cli
from gnomon.common.storage.schema import audit_log, jobs
from gnomon_dlq_support import SHARDS, TOKEN, count, make_dead, replay_req, ts
from gnomon_test_support import decode, wait_until


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
    assert await names(failure_class=FAILURE_CLASS_TRANSIENT) == [str(j) for j in reversed(b)]
    assert await names(error_contains="TIMEOUT talking") == [str(j) for j in reversed(b)]  # case-insensitive
    assert await names(error_contains="(100%)") == [str(j) for j in reversed(a)]  # % is literal
    assert await names(error_contains="100_%") == []
    assert await names(start_time=ts(t0 + timedelta(hours=1)), end_time=ts(t0 + timedelta(hours=3))) == [
        str(a[2]),
        str(a[1]),
    ]  # [start, end)
    assert await names(parent="namespaces/other") and len(await names(parent="namespaces/other")) == 1

    d = (await stub.ListDeadLetters(pb.ListDeadLettersRequest(queue="b", page_size=1))).dead_letters[0]
    assert d.job.state == job_pb2.JOB_STATE_DEAD and d.job.failure_class == FAILURE_CLASS_TRANSIENT
    assert d.job.last_error == "Timeout talking to billing" and not d.replayed_by and not d.replay_of
    [att] = d.attempts
    assert (att.attempt, att.state, att.failure_class, att.error, att.worker_id, att.fencing_token) == (
        1,
        "FAILED",
        FAILURE_CLASS_TRANSIENT,
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


async def test_namespace_without_a_grant_is_permission_denied(engine):
    """With real authentication: bob is admin of acme and other, nothing in evil; the actor recorded
    is bob, not the x-gnomon-actor he claims."""
    from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as pb_grpc
    from gnomon.api.dead_letter_servicer import DeadLetterServicer
    from gnomon.common.auth import keys
    from gnomon.common.auth.authenticator import Authenticator
    from gnomon.common.auth.principals import Role
    from gnomon.common.rpc.server import GrpcServer
    from gnomon.common.storage import tenancy
    from gnomon_test_support import own_shards

    await own_shards(engine, TOKEN, owner="test")
    key = keys.generate()
    async with engine.begin() as conn:
        await tenancy.ensure_principal(conn, "bob")
        await tenancy.add_key(conn, "bob", key)
        for ns in ("acme", "other"):
            await tenancy.grant(conn, "bob", ns, Role.ADMIN)
    service = (
        pb_grpc.add_DeadLetterServiceServicer_to_server,
        DeadLetterServicer.on(engine, shards=SHARDS),
        "x",
    )
    server = GrpcServer("127.0.0.1:0", [service], authenticator=Authenticator(engine, cache_s=0))
    await server.start()
    channel = grpc.aio.insecure_channel(server.address)
    stub = pb_grpc.DeadLetterServiceStub(channel)
    try:
        await make_dead(engine, 2, namespace="acme")
        await make_dead(engine, 2, namespace="evil")
        total = await count(engine, jobs)
        md = (("authorization", f"Bearer {key.token}"), ("x-gnomon-actor", "somebody-else"))
        calls = [
            (stub.ReplayDeadLetters, replay_req(parent="namespaces/evil")),
            (stub.ReplayDeadLetters, replay_req(parent="namespaces/evil", dry_run=True)),
            (stub.ListDeadLetters, pb.ListDeadLettersRequest(parent="namespaces/evil")),
            (stub.ListAuditEntries, pb.ListAuditEntriesRequest(parent="namespaces/evil")),
            (stub.ReplayDeadLetters, replay_req()),
        ]  # empty parent = default, not granted
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
        assert entry.actor == "bob"
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.ListAuditEntries(pb.ListAuditEntriesRequest(parent="namespaces/acme"))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
        await server.stop(0)


async def test_every_dlq_statement_runs_through_the_cockroachdb_dialect(crdb_api):
    stub, engine = crdb_api
    await make_dead(engine, 3, queue="c", error="Gateway timeout")
    filt = dict(
        queue="c",
        failure_class=FAILURE_CLASS_PERMANENT,
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
    # the actor is the authenticated principal ("insecure" on this test server)
    assert entry["actor"] == "insecure" and entry["reason"] == "fixed the parser"
    assert entry["details"]["filter"]["failure_class"] == "PERMANENT"

    def sdk():
        with Client(api=address, metadata=[("x-gnomon-actor", "dave")]) as c:  # a claim: ignored
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
    assert [e.actor for e in entries] == ["insecure", "insecure"]
    assert entries[0].action == "dead_letters.replay.dry_run" and entries[0].details["max_rate"] == 5
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in bad.field_violations] == ["max_jobs", "reason"]
