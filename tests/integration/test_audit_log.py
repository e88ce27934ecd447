"""The audit log nothing can stop (docs/security.md, "Audit"), against real
``gnomon api/dispatcher/planner/reaper`` processes, PostgreSQL and etcd:

(a) a refused call with a NUL in its ``parent`` is audited escaped and does not stop the log; a row the
    database refuses is isolated and counted (``gnomon_audit_rows_failed_total``);
(b) a full audit buffer refuses calls with UNAVAILABLE (AUDIT_UNAVAILABLE) instead of running them
    unaudited (the writer stalled by a lock on ``audit_log`` held from a test connection);
(c) SIGTERM right after calls: the drain writes every buffered row, the coalesced ones included;
(d) a flood of refused calls (at least 500, for at least 5 s) is coalesced into a few rows with counts, visible to an admin through
    ListAuditEntries and ``gnomon dlq audit``, while the honest tenant's dispatch lag stays bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import grpc
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as dgrpc
from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jgrpc
from gnomon.sdk import Client
from gnomon.sdk.connection import resolve
from gnomon_isolation_support import honest_tenant
from gnomon_test_support import decode, running_suite, scrape, sql, wait_for

NUL_PARENT = "namespaces/acme\x00"


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("audit"),
        env={
            "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1",
            "GNOMON_AUTH_CACHE_S": "0.2",
            "GNOMON_AUDIT_COALESCE_S": "2",
        },
    ) as s:
        yield s


def principal(suite, name: str, *grants: tuple[str, str]) -> str:
    """Creates principal ``name`` with ``grants`` (role, namespace) as the suite's admin; returns a key."""
    with Client(api=suite.api_address) as admin:
        admin.create_principal(name)
        for role, ns in grants:
            admin.grant_role(name, role, ns)
        return admin.create_api_key(name).token


def create(stub, parent: str, queue: str = "audited") -> jpb.CreateJobResponse:
    """One raw CreateJob (no SDK retries), with a request_id."""
    return stub.CreateJob(
        jpb.CreateJobRequest(parent=parent, queue=queue, payload=b"x", request_id=str(uuid.uuid4())),
        timeout=15,
    )


def refused(fn, *args) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args)
    _, info, _ = decode(e.value)
    return e.value.code(), info.reason if info else ""


def rows_of(suite, actor: str) -> list[tuple]:
    """``(namespace, action, resource, outcome, count)`` of ``actor``'s audit rows, oldest first."""
    return sql(
        suite.database_url,
        "SELECT namespace, action, resource, outcome, count FROM audit_log WHERE actor = %s "
        "ORDER BY created_at, id",
        actor,
    )


def audited(suite, names: list[str]) -> bool:
    got = {
        r[0]
        for r in sql(suite.database_url, "SELECT resource FROM audit_log WHERE resource = ANY(%s)", names)
    }
    return set(names) <= got


def execute(suite, statement: str) -> None:
    """Runs one statement that returns no rows (DDL) on the suite's database."""
    with psycopg.connect(suite.database_url.replace("postgresql+psycopg://", "postgresql://")) as c:
        c.execute(statement)


def api_proc(suite):
    return next(p for p in suite.procs if p.role == "api")


def failed_rows(suite, reason: str) -> float:
    """``gnomon_audit_rows_failed_total{reason=...}`` of the suite's API."""
    for fam in text_string_to_metric_families(scrape(api_proc(suite).metrics_address)):
        for s in fam.samples:
            if s.name == "gnomon_audit_rows_failed_total" and s.labels.get("reason") == reason:
                return s.value
    raise AssertionError("gnomon_audit_rows_failed_total is not exported")


def test_a_nul_parent_refusal_is_audited_escaped_and_the_log_keeps_going(suite):
    nogrant = principal(suite, "nogrant")
    admin = principal(suite, "beta-admin", ("admin", "beta"), ("client", "beta"))
    with resolve(suite.api_address, api_key=nogrant).channel() as ch:
        got = refused(create, jgrpc.JobServiceStub(ch), NUL_PARENT)
    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT

    # the honest admin's mutating calls are audited within a few seconds
    with resolve(suite.api_address, api_key=admin).channel() as ch:
        names = [create(jgrpc.JobServiceStub(ch), "namespaces/beta").job.name for _ in range(3)]
    wait_for(lambda: audited(suite, names) or None, 10, "the honest admin's calls in the audit log")
    # the refused call is there, its parent escaped (namespace "*": the parent names none)
    assert rows_of(suite, "nogrant") == [("*", "CreateJob", "namespaces/acme\\x00", "INVALID_ARGUMENT", 1)]
    with resolve(suite.api_address).channel() as ch:  # the cluster admin reads namespace "*"
        entries = dgrpc.DeadLetterServiceStub(ch).ListAuditEntries(
            dpb.ListAuditEntriesRequest(parent="namespaces/*", page_size=1000), timeout=15
        )
    mine = [e for e in entries.audit_entries if e.actor == "nogrant"]
    assert [(e.resource, e.outcome, e.count) for e in mine] == [
        ("namespaces/acme\\x00", "INVALID_ARGUMENT", 1)
    ]

    # a row the database refuses (here a CHECK constraint against one actor) is isolated and counted
    doomed = principal(suite, "doomed", ("client", "beta"))
    before = failed_rows(suite, "refused")
    execute(suite, "ALTER TABLE audit_log ADD CONSTRAINT t_refuse CHECK (actor <> 'doomed') NOT VALID")
    try:
        with (
            resolve(suite.api_address, api_key=doomed).channel() as dch,
            resolve(suite.api_address, api_key=admin).channel() as ach,
        ):
            doomed_job = create(jgrpc.JobServiceStub(dch), "namespaces/beta").job.name
            after = [create(jgrpc.JobServiceStub(ach), "namespaces/beta").job.name for _ in range(3)]
        wait_for(lambda: audited(suite, after) or None, 10, "the rows batched with the refused one")
        wait_for(lambda: failed_rows(suite, "refused") >= before + 1 or None, 10, "the failure counter")
    finally:
        execute(suite, "ALTER TABLE audit_log DROP CONSTRAINT t_refuse")
    assert failed_rows(suite, "refused") == before + 1
    assert not audited(suite, [doomed_job])
    with open(api_proc(suite).log_path, encoding="utf-8", errors="replace") as f:
        assert any("audit row refused by the database" in line and doomed_job in line for line in f)


def test_d_a_flood_of_refusals_is_coalesced_and_the_honest_tenant_keeps_its_bound(suite):
    mallory = principal(suite, "mallory", ("client", "evil"))
    sent = 0
    with honest_tenant(suite, namespace="acme", queue="honest") as acme:
        t0 = time.monotonic()
        with resolve(suite.api_address, api_key=mallory).channel() as ch:
            stub = jgrpc.JobServiceStub(ch)
            # at least 500 refused calls, and for at least 5 s (the honest tenant's measuring window)
            while sent < 500 or time.monotonic() - t0 < 5:
                assert refused(create, stub, "namespaces/acme") == (
                    grpc.StatusCode.PERMISSION_DENIED,
                    "NAMESPACE_NOT_ALLOWED",
                )
                sent += 1
        attack_s = time.monotonic() - t0
    print(f"{sent} refused calls in {attack_s:.1f} s ({sent / attack_s:.0f}/s); {acme.report}")
    acme.report.assert_within(p99_s=1.0)

    def coalesced():
        rows = rows_of(suite, "mallory")
        return rows if sum(r[4] for r in rows) == sent else None

    rows = wait_for(coalesced, 20, "every refused call counted in the audit log")
    assert {r[:4] for r in rows} == {("acme", "CreateJob", "namespaces/acme", "PERMISSION_DENIED")}
    # at most two rows per 2 s window (the first at once, the rest as one row with a count)
    assert len(rows) <= 2 * (attack_s / 2 + 2), rows
    print(f"audit rows for the {sent} refused calls: {len(rows)}, counts {[r[4] for r in rows]}")

    # an admin sees the counts: ListAuditEntries ...
    with Client(api=suite.api_address, namespace="acme") as admin:
        entries = [e for e in admin.list_audit_entries(page_size=1000) if e.actor == "mallory"]
    assert sum(e.count for e in entries) == sent and len(entries) == len(rows)
    # ... and the CLI
    out = subprocess.run(
        [sys.executable, "-m", "gnomon.cli.main", "dlq", "audit", "--json", "--all", "--namespace", "acme"],
        env={**os.environ, **suite.client_env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    cli = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert sum(d["count"] for d in cli if d["actor"] == "mallory") == sent


def test_b_a_full_audit_buffer_refuses_calls_with_unavailable(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        # the whole buffer may be one principal's (test e tests the per-principal share)
        env={
            "GNOMON_AUDIT_BUFFER_ROWS": "5",
            "GNOMON_AUDIT_PRINCIPAL_SHARE": "1",
            "GNOMON_AUTH_CACHE_S": "0.2",
        },
    ) as s:
        admin = principal(s, "b-admin", ("client", "beta"))
        url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url) as lock, resolve(s.api_address, api_key=admin).channel() as ch:
            stub = jgrpc.JobServiceStub(ch)
            create(stub, "namespaces/beta")  # warm: the key is verified and cached
            wait_for(
                lambda: sql(s.database_url, "SELECT 1 FROM audit_log WHERE actor = 'b-admin'") or None,
                10,
                "the first call's audit row",
            )
            lock.execute("LOCK TABLE audit_log IN EXCLUSIVE MODE")  # the writer's INSERT now waits
            served, refusals = [], []
            for _ in range(20):
                try:
                    served.append(create(stub, "namespaces/beta").job.name)
                except grpc.RpcError as e:
                    _, info, _ = decode(e)
                    refusals.append((e.code(), info.reason if info else ""))
            assert len(served) <= 5, served
            assert refusals and set(refusals) == {(grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE")}
            lock.rollback()  # the writer goes on
        # every call that ran is audited; none of the refused ones ran
        wait_for(lambda: audited(s, served) or None, 15, "the served calls' audit rows")
        jobs = sql(s.database_url, "SELECT count(*) FROM jobs WHERE namespace = 'beta'")[0][0]
        assert jobs == len(served) + 1


def test_c_sigterm_right_after_calls_writes_every_buffered_row(pg_server, migrated_template, tmp_path):
    # no periodic flush: only the drain can write these rows
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        env={"GNOMON_AUDIT_FLUSH_S": "60", "GNOMON_AUDIT_COALESCE_S": "60", "GNOMON_AUTH_CACHE_S": "0.2"},
    ) as s:
        admin = principal(s, "c-admin", ("client", "beta"))
        nogrant = principal(s, "c-nogrant")
        with resolve(s.api_address, api_key=nogrant).channel() as ch:
            stub = jgrpc.JobServiceStub(ch)
            assert refused(create, stub, NUL_PARENT)[0] == grpc.StatusCode.INVALID_ARGUMENT
            for _ in range(5):
                assert refused(create, stub, "namespaces/beta")[0] == grpc.StatusCode.PERMISSION_DENIED
        with resolve(s.api_address, api_key=admin).channel() as ch:
            names = [create(jgrpc.JobServiceStub(ch), "namespaces/beta").job.name for _ in range(3)]
        assert s.stop_proc(api_proc(s), signal.SIGTERM) == 0
        assert audited(s, names)
        rows = rows_of(s, "c-nogrant")
        assert ("*", "CreateJob", "namespaces/acme\\x00", "INVALID_ARGUMENT", 1) in rows
        denied = [r for r in rows if r[3] == "PERMISSION_DENIED"]
        assert sum(r[4] for r in denied) == 5 and len(denied) == 2  # the first, then 4 coalesced


def attempt(stub, parent: str, served: list[str], refusals: list[tuple]) -> None:
    """One raw CreateJob: its job name into ``served``, or its (code, reason) into ``refusals``."""
    try:
        served.append(create(stub, parent).job.name)
    except grpc.RpcError as e:
        _, info, _ = decode(e)
        refusals.append((e.code(), info.reason if info else ""))


def test_e_one_principal_neither_fills_the_audit_buffer_nor_the_windows_of_others(
    pg_server, migrated_template, tmp_path
):
    # a buffer of 64 rows: 8 per principal (1/8); 10 coalescing windows, 3 per principal
    env = {
        "GNOMON_AUDIT_BUFFER_ROWS": "64",
        "GNOMON_AUDIT_COALESCE_S": "60",
        "GNOMON_AUDIT_COALESCE_KEYS": "10",
        "GNOMON_AUDIT_COALESCE_PRINCIPAL_KEYS": "3",
        "GNOMON_AUTH_CACHE_S": "0.2",
    }
    with running_suite(pg_server, migrated_template, tmp_path, env=env) as s:
        flood = principal(s, "e-flood", ("client", "beta"))
        honest = principal(s, "e-honest", ("client", "gamma"))
        url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
        with (
            psycopg.connect(url) as lock,
            resolve(s.api_address, api_key=flood).channel() as fch,
            resolve(s.api_address, api_key=honest).channel() as hch,
        ):
            fstub, hstub = jgrpc.JobServiceStub(fch), jgrpc.JobServiceStub(hch)
            warm = [create(fstub, "namespaces/beta").job.name, create(hstub, "namespaces/gamma").job.name]
            wait_for(lambda: audited(s, warm) or None, 10, "the first calls' audit rows")

            # (1) the audit writer stalls; the flooding principal fills its share and is refused ...
            lock.execute("LOCK TABLE audit_log IN EXCLUSIVE MODE")  # the writer's INSERT now waits
            fserved: list[str] = []
            frefused: list[tuple] = []
            for _ in range(30):
                attempt(fstub, "namespaces/beta", fserved, frefused)
            assert len(fserved) <= 8, fserved
            assert frefused and set(frefused) == {(grpc.StatusCode.UNAVAILABLE, "AUDIT_UNAVAILABLE")}
            # ... while the other principal's calls, within its own share, are still served
            hserved: list[str] = []
            hrefused: list[tuple] = []
            for _ in range(5):
                attempt(hstub, "namespaces/gamma", hserved, hrefused)
            assert len(hserved) == 5 and not hrefused, hrefused
            lock.rollback()  # the writer goes on
            wait_for(lambda: audited(s, fserved + hserved) or None, 15, "every served call's audit row")

            # (2) the flooding principal aims refused calls at 20 made-up namespaces: past its 3
            # windows they coalesce in "*", and the other principal's refusal keeps its namespace
            for i in range(20):
                assert (
                    refused(create, fstub, f"namespaces/made-up-{i}")[0] == grpc.StatusCode.PERMISSION_DENIED
                )
            assert refused(create, hstub, "namespaces/delta")[0] == grpc.StatusCode.PERMISSION_DENIED
        assert s.stop_proc(api_proc(s), signal.SIGTERM) == 0  # the drain writes the held rows
        jobs = sql(s.database_url, "SELECT count(*) FROM jobs WHERE namespace IN ('beta', 'gamma')")[0][0]
        assert jobs == len(fserved) + len(hserved) + 2
        assert [r for r in rows_of(s, "e-honest") if r[3] == "PERMISSION_DENIED"] == [
            ("delta", "CreateJob", "namespaces/delta", "PERMISSION_DENIED", 1)
        ]
        denied = [r for r in rows_of(s, "e-flood") if r[3] == "PERMISSION_DENIED"]
        assert sum(r[4] for r in denied) == 20
        spaces = {r[0] for r in denied}
        assert "*" in spaces and len(spaces - {"*"}) <= 3, denied
        assert len(denied) <= 3 + 2, denied  # one row per namespace window, two for "*"
