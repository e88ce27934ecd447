"""The audit writer's pure logic, without a database (gnomon.common.rpc.audit, gnomon.common.storage.isolation):
escaping, coalescing of refusals, the buffer bound, and the bisection of a refused batch."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DataError

from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon.common.auth.principals import Principal, PrincipalKind
from gnomon.common.errors import AuditUnavailable
from gnomon.common.rpc.audit import AuditLog, escape
from gnomon.common.rpc.auth import Caller
from gnomon.common.storage.isolation import commit_isolated, item_fault

MALLORY = Caller(Principal("mallory", PrincipalKind.API_KEY), "ipv4:127.0.0.1:1")
ALICE = Caller(Principal("alice", PrincipalKind.API_KEY), "ipv4:127.0.0.1:2")


def test_escape_makes_control_characters_visible_and_keeps_printable_text():
    assert escape("namespaces/acme\x00", 512) == "namespaces/acme\\x00"
    assert escape("a\nforged line\r\x1b[31m", 512) == "a\\nforged line\\r\\x1b[31m"
    assert escape("back\\slash", 512) == "back\\\\slash"  # unambiguous: a literal "\x00" stays apart
    assert escape("zero\u200bwidth", 512) == "zero\\u200bwidth"
    assert escape("Zürich — 東京", 512) == "Zürich — 東京"
    assert escape("\x00" * 1000, 10) == "\\x00\\x00\\x"
    assert len(escape("x" * 1000, 512)) == 512


def record(log: AuditLog, caller: Caller, ns: str, outcome: str, *, admitted: bool = False) -> None:
    log.record(
        caller=caller,
        method="/gnomon.v1.JobService/CreateJob",
        namespace=ns,
        request=jpb.CreateJobRequest(parent=f"namespaces/{ns}", queue="q"),
        response=None,
        outcome=outcome,
        admitted=admitted,
    )


def test_refusals_of_one_key_coalesce_into_the_first_row_and_one_counted_row():
    log = AuditLog(None, coalesce_s=60)  # no database: nothing is flushed
    for _ in range(100):
        record(log, MALLORY, "acme", "PERMISSION_DENIED")
    record(log, MALLORY, "other", "PERMISSION_DENIED")  # another key: its own first row
    record(log, ALICE, "acme", "OK")  # successes are never coalesced
    record(log, ALICE, "acme", "OK")
    assert [(r["actor"], r["namespace"], r["count"]) for r in log.pending] == [
        ("mallory", "acme", 1),
        ("mallory", "other", 1),
        ("alice", "acme", 1),
        ("alice", "acme", 1),
    ]
    log._close_windows()  # the end of the window (or stop()): the held row joins the buffer
    assert [(r["namespace"], r["outcome"], r["count"]) for r in log.pending[4:]] == [
        ("acme", "PERMISSION_DENIED", 99)
    ]
    assert "last_time" in log.pending[4]["details"]
    assert sum(r["count"] for r in log.pending if r["actor"] == "mallory") == 101


def test_coalescing_off_writes_one_row_per_refusal():
    log = AuditLog(None, coalesce_s=0)
    for _ in range(3):
        record(log, MALLORY, "acme", "PERMISSION_DENIED")
    assert [r["count"] for r in log.pending] == [1, 1, 1]


def test_past_the_key_bound_refusals_coalesce_across_namespaces():
    log = AuditLog(None, coalesce_s=60, coalesce_keys=2)
    for i in range(50):  # a refusal aimed at a new namespace each time
        record(log, MALLORY, f"ns{i}", "PERMISSION_DENIED")
    log._close_windows()
    assert len(log.pending) <= 4
    assert sum(r["count"] for r in log.pending) == 50
    assert {r["namespace"] for r in log.pending} == {"ns0", "ns1", "*"}


def test_a_full_buffer_refuses_admission_and_a_finished_call_frees_its_reservation():
    log = AuditLog(None, buffer_rows=2, coalesce_s=60, principal_share=1)
    log.admit(ALICE)
    log.admit(ALICE)
    with pytest.raises(AuditUnavailable) as e:
        log.admit(ALICE)
    assert e.value.reason == "AUDIT_UNAVAILABLE" and e.value.code.name == "UNAVAILABLE"
    record(log, ALICE, "acme", "OK", admitted=True)  # its row replaces its reservation
    with pytest.raises(AuditUnavailable):
        log.admit(ALICE)
    # a refusal while the buffer is full waits in its window instead of growing the buffer
    record(log, MALLORY, "acme", "UNAVAILABLE")
    record(log, ALICE, "acme", "OK", admitted=True)
    assert len(log.pending) == 2
    log._close_windows()
    assert [r["outcome"] for r in log.pending] == ["OK", "OK", "UNAVAILABLE"]


def test_a_principal_holding_its_share_is_refused_while_another_is_admitted():
    log = AuditLog(None, buffer_rows=16, coalesce_s=60)  # default share 1/8: 2 rows per principal
    assert log.principal_rows == 2
    log.admit(MALLORY)
    record(log, MALLORY, "evil", "OK", admitted=True)  # a buffered row counts like a reservation
    log.admit(MALLORY)
    with pytest.raises(AuditUnavailable):
        log.admit(MALLORY)
    log.admit(ALICE)  # the buffer is far from full: alice keeps her share
    log.admit(ALICE)
    with pytest.raises(AuditUnavailable):
        log.admit(ALICE)
    assert (log.held(MALLORY), log.held(ALICE)) == (2, 2)
    # a written row frees its principal's share
    written = log.pending[:1]
    del log.pending[:1]
    log._forget(written)
    log.admit(MALLORY)
    assert log.held(MALLORY) == 2


def test_past_its_own_window_cap_only_that_principals_refusals_go_to_star():
    log = AuditLog(None, coalesce_s=60, coalesce_keys=1000, coalesce_principal_keys=3)
    for i in range(10_000):  # mallory aims at a new namespace each time
        record(log, MALLORY, f"ns{i}", "PERMISSION_DENIED")
    for ns in ("acme", "beta"):  # alice's refusals keep their namespace
        record(log, ALICE, ns, "PERMISSION_DENIED")
        record(log, ALICE, ns, "PERMISSION_DENIED")
    assert len(log._windows) == 3 + 1 + 2  # mallory: 3 namespaces and "*"; alice: 2
    log._close_windows()
    mallory = {r["namespace"]: r["count"] for r in log.pending if r["actor"] == "mallory" and r["count"] > 1}
    assert mallory == {"*": 10_000 - 3 - 1}  # the first "*" refusal has its own row
    assert sum(r["count"] for r in log.pending if r["actor"] == "mallory") == 10_000
    assert len([r for r in log.pending if r["actor"] == "mallory"]) == 3 + 2
    alice = sorted((r["namespace"], r["count"]) for r in log.pending if r["actor"] == "alice")
    assert alice == [("acme", 1), ("acme", 1), ("beta", 1), ("beta", 1)]


def test_windows_end_in_creation_order_without_a_scan(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("gnomon.common.rpc.audit.time.monotonic", lambda: now[0])
    log = AuditLog(None, coalesce_s=10, coalesce_principal_keys=2)
    record(log, MALLORY, "a", "PERMISSION_DENIED")
    now[0] += 5
    record(log, MALLORY, "b", "PERMISSION_DENIED")
    record(log, MALLORY, "b", "PERMISSION_DENIED")
    now[0] += 5  # "a" ends, "b" is still open: mallory may open one more namespace window
    record(log, MALLORY, "c", "PERMISSION_DENIED")
    assert [w.key[1] for w in log._ends] == ["b", "c"] and log._open == {"mallory": 2}
    now[0] += 5  # "b" ends: its held row joins the buffer
    log._close_windows(now[0])
    assert [(r["namespace"], r["count"]) for r in log.pending] == [("a", 1), ("b", 1), ("c", 1), ("b", 1)]
    log._close_windows()
    assert not log._windows and not log._ends and not log._open


async def test_commit_isolated_bisects_down_to_the_bad_items():
    written: list[int] = []
    refused: list[int] = []
    calls = 0

    async def commit(part: list[int]) -> None:
        nonlocal calls
        calls += 1
        if 13 in part or 40 in part:
            raise DataError("INSERT", {}, ValueError("NUL"))

    def committed(part: list[int], _: None) -> None:
        written.extend(part)

    await commit_isolated(
        list(range(64)), commit, committed=committed, refused=lambda item, exc: refused.append(item)
    )
    assert sorted(written) == [i for i in range(64) if i not in (13, 40)]
    assert refused == [13, 40]
    assert calls <= 1 + 2 * 2 * 6  # at most two transactions per level per bad item


async def test_commit_isolated_propagates_a_transient_failure():
    failed: list[list[int]] = []

    async def commit(part: list[int]) -> None:
        raise ConnectionError("the database went away")

    with pytest.raises(ConnectionError):
        await commit_isolated(
            [1, 2, 3],
            commit,
            committed=lambda part, _: None,
            refused=lambda item, exc: None,
            failed=lambda part, exc: failed.append(part),
        )
    assert failed == [[1, 2, 3]]
    assert not item_fault(ConnectionError()) and item_fault(ValueError())
