"""The audit writer (gnomon.common.rpc.audit.AuditLog) on a real PostgreSQL: a row the database refuses
is isolated from its batch (the others are written) and counted; a NUL-bearing value is stored
escaped; what cannot be written when the writer stops is logged at ERROR and counted, never dropped
in silence."""

from __future__ import annotations

import logging

from sqlalchemy import text

from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon.common.auth.principals import Principal, PrincipalKind
from gnomon.common.rpc.audit import AuditLog
from gnomon.common.rpc.auth import Caller
from gnomon_test_support import open_engine


def caller(name: str) -> Caller:
    return Caller(Principal(name, PrincipalKind.API_KEY), "ipv4:127.0.0.1:1")


def record(log: AuditLog, actor: str, parent: str) -> None:
    log.record(
        caller=caller(actor),
        method="/gnomon.v1.JobService/CreateJob",
        namespace="acme",
        request=jpb.CreateJobRequest(parent=parent, queue="q"),
        response=None,
        outcome="OK",
    )


async def test_a_refused_row_is_isolated_counted_and_logged(engine, caplog):
    async with engine.begin() as c:
        await c.execute(text("ALTER TABLE audit_log ADD CONSTRAINT t_refuse CHECK (actor <> 'doomed')"))
    log = AuditLog(engine, coalesce_s=0)
    for i in range(40):
        record(log, "doomed" if i == 17 else f"p{i}", "namespaces/acme\x00" if i == 3 else "namespaces/acme")
    with caplog.at_level(logging.ERROR, logger="gnomon.common.rpc.audit"):
        assert await log.flush()
    async with engine.connect() as c:
        rows = (await c.execute(text("SELECT actor, resource FROM audit_log ORDER BY actor"))).all()
    assert len(rows) == 39 and "doomed" not in {r[0] for r in rows}
    assert ("p3", "namespaces/acme\\x00") in rows
    assert log.failed == 1 and not log.pending
    assert any("audit row refused by the database" in m and '"actor": "doomed"' in m for m in caplog.messages)


async def test_rows_that_cannot_be_written_at_stop_are_logged_and_counted(db_url, caplog):
    # a database that is not there: a closed port
    gone = open_engine(db_url.rsplit("@", 1)[0] + "@127.0.0.1:1/nowhere")
    try:
        log = AuditLog(gone, coalesce_s=60)
        record(log, "alice", "namespaces/acme")
        log.record(
            caller=caller("mallory"),
            method="/gnomon.v1.JobService/CreateJob",
            namespace="acme",
            request=jpb.CreateJobRequest(parent="namespaces/acme"),
            response=None,
            outcome="PERMISSION_DENIED",
        )
        with caplog.at_level(logging.ERROR, logger="gnomon.common.rpc.audit"):
            await log.stop()
        assert log.failed == 2 and not log.pending
        lost = [m for m in caplog.messages if m.startswith("audit row not written at shutdown")]
        assert len(lost) == 2 and any('"actor": "mallory"' in m for m in lost)
    finally:
        await gone.dispose()
