"""The idempotency examples (examples/local_db_effect.py, examples/external_api_effect.py; see
docs/idempotency.md), first in-process, then through real processes (api, dispatcher, reaper,
``gnomon worker --handler examples...``): the first attempt performs the effect and its worker dies
before reporting (the ACK is lost); the reaper declares the lease lost and, the job being
idempotent, retries it; the retry finds the effect done. The effect is applied exactly once and the
job SUCCEEDS on attempt 2 with exactly one accepted SUCCEEDED result.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import uuid

import psycopg
import pytest

from gnomon.cli.suite import Suite
from gnomon.sdk import Client, FailureClass, JobContext, PermanentError
from gnomon_test_support import FAST_REAPING, running_suite, wait_for

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS_DIR)
if ROOT not in sys.path:  # examples/ lives at the repository root, outside the package
    sys.path.insert(0, ROOT)

from examples import external_api_effect, local_db_effect  # noqa: E402


def ctx_for(key: str, payload: bytes, attempt: int = 1, job: str | None = None) -> JobContext:
    return JobContext(
        job=job or f"namespaces/default/jobs/{uuid.uuid4()}",
        payload=payload,
        attempt=attempt,
        idempotency_key=key,
    )


# -- in-process: the examples' logic --------------------------------------------------------------


def test_local_db_effect_applies_once_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "ledger.sqlite3"))
    body = b'{"account": "alice", "amount_cents": 500}'
    job = f"namespaces/default/jobs/{uuid.uuid4()}"
    assert local_db_effect.handle(ctx_for("order-1", body, 1, job)) == "applied"
    assert local_db_effect.handle(ctx_for("order-1", body, 2, job)) == "already applied"  # the retry
    assert local_db_effect.balance("alice") == 500
    assert local_db_effect.handle(ctx_for("order-2", body)) == "applied"  # another operation
    assert local_db_effect.balance("alice") == 1000
    assert [(k, a) for k, _, a in local_db_effect.effects()] == [("order-1", 1), ("order-2", 1)]
    with pytest.raises(PermanentError):
        local_db_effect.handle(ctx_for("order-3", b'{"account": "alice"}'))


def test_local_db_effect_concurrent_duplicates_apply_once(tmp_path, monkeypatch):
    """Two attempts running at once (a lease lost while the first still runs): the unique marker
    lets exactly one commit the credit."""
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "ledger.sqlite3"))
    local_db_effect.balance("bob")  # create the schema first
    body = b'{"account": "bob", "amount_cents": 7}'
    results, barrier = [], threading.Barrier(8)

    def run(i):
        barrier.wait()
        results.append(local_db_effect.handle(ctx_for("same-key", body, i)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["already applied"] * 7 + ["applied"]
    assert local_db_effect.balance("bob") == 7


def test_local_db_effect_crash_inside_the_transaction_leaves_nothing_and_the_retry_applies(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LEDGER_DB", str(tmp_path / "ledger.sqlite3"))
    body = b'{"account": "carol", "amount_cents": 300}'
    real_credit = local_db_effect.credit

    def credit_then_die(db, account, amount):
        real_credit(db, account, amount)
        raise SystemExit("worker died before COMMIT")

    monkeypatch.setattr(local_db_effect, "credit", credit_then_die)
    with pytest.raises(SystemExit):
        local_db_effect.handle(ctx_for("order-9", body, 1))
    assert local_db_effect.effects() == [] and local_db_effect.balance("carol") == 0  # marker rolled back too
    monkeypatch.setattr(local_db_effect, "credit", real_credit)
    assert local_db_effect.handle(ctx_for("order-9", body, 2)) == "applied"
    assert local_db_effect.balance("carol") == 300


def test_marker_written_before_the_effect_loses_the_job(tmp_path):
    """The trap (docs/idempotency.md): a marker committed in its own transaction *before* the
    effect. A crash between the two leaves the marker without the effect; the retry sees the marker,
    skips, and the job SUCCEEDS with the effect never applied -- silently lost, which is worse
    than the duplicate the marker was meant to prevent."""
    path = str(tmp_path / "ledger.sqlite3")

    def marker_first_wrong(ctx, crash: bool):
        with local_db_effect.ledger(path) as db:
            try:
                db.execute(
                    "INSERT INTO effects VALUES (?, ?, ?, 'now')", (ctx.idempotency_key, ctx.job, ctx.attempt)
                )
            except sqlite3.IntegrityError:
                return "already applied"  # the marker says "done": skip
            if crash:
                raise SystemExit("crash between marker and effect")
            local_db_effect.credit(db, "dave", 100)  # autocommit: a second transaction
            return "applied"

    body = b'{"account": "dave", "amount_cents": 100}'
    with pytest.raises(SystemExit):
        marker_first_wrong(ctx_for("order-5", body, 1), crash=True)
    assert marker_first_wrong(ctx_for("order-5", body, 2), crash=False) == "already applied"
    assert local_db_effect.balance("dave", path) == 0  # the credit never happened


def test_external_api_deduplicates_on_the_idempotency_key():
    with external_api_effect.PaymentsServer() as server:
        p1 = external_api_effect.charge(server.url, "erin", 250, "order-7")
        p2 = external_api_effect.charge(server.url, "erin", 250, "order-7")  # a retry: replayed
        assert p1 == p2 and len(server.payments) == 1 and server.requests == 2
        with pytest.raises(PermanentError, match="422"):  # same key, other request
            external_api_effect.charge(server.url, "erin", 999, "order-7")
        external_api_effect.charge(server.url, "erin", 250, "order-8")
        assert [p["idempotency_key"] for p in server.payments] == ["order-7", "order-8"]


# -- real processes: the ACK-lost case ------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("idem"),
        env=FAST_REAPING,
    ) as s:
        yield s


def attempt_rows(url: str, job_name: str):
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
        return c.execute(
            "SELECT attempt, state, accepted_at IS NOT NULL FROM attempts WHERE job_id = %s ORDER BY attempt",
            (job_name.rsplit("/", 1)[1],),
        ).fetchall()


def run_ack_lost(suite: Suite, queue: str, crashing: str, plain: str, env: dict, payload: dict, key: str):
    """Worker A runs ``crashing`` (effect, then os._exit on attempt 1); once it is dead, worker B runs
    the example's own ``plain`` handler and gets the retry. Returns the finished job."""
    env = {"PYTHONPATH": os.pathsep.join([ROOT, TESTS_DIR]), **env}
    first = suite.start_worker([queue], crashing, env=env)
    with Client(api=suite.api_address) as c:
        job = c.create_job(
            queue, payload, idempotent=True, lease_duration=2, idempotency_key=key, max_attempts=3
        )
        assert first.popen.wait(30) == 1, "attempt 1 should have killed its worker after the effect"
        suite.start_worker([queue], plain, env=env)
        done = wait_for(lambda: (j := c.get_job(job.name)).terminal and j, 45, "the retry to finish")
        history = c.list_job_attempts(job.name)
    assert (done.state, done.attempt) == ("SUCCEEDED", 2)
    assert [(a.attempt, a.state) for a in history] == [(1, "LOST"), (2, "SUCCEEDED")]
    assert history[0].failure_class is FailureClass.AMBIGUOUS and history[0].worker_id != history[1].worker_id
    # exactly one accepted SUCCEEDED result: attempt 1 was accepted but never reported
    assert suite.database_url is not None  # running_suite gives its suite a database
    assert attempt_rows(suite.database_url, job.name) == [(1, "LOST", True), (2, "SUCCEEDED", True)]
    return done


def test_ack_lost_local_db_effect_is_applied_exactly_once(suite):
    ledger = os.path.join(suite.work_dir, "ledger.sqlite3")
    job = run_ack_lost(
        suite,
        "credits",
        "gnomon_effect_handlers:local_db_then_crash",
        "examples.local_db_effect:handle",
        {"LEDGER_DB": ledger},
        {"account": "alice", "amount_cents": 500},
        key="order-42-credit",
    )
    effects = local_db_effect.effects(ledger)
    assert effects == [("order-42-credit", job.name, 1)]  # applied once, by attempt 1
    assert local_db_effect.balance("alice", ledger) == 500  # the retry found the marker
    # what an operator sees: gnomon job history
    from typer.testing import CliRunner

    from gnomon.cli.main import app

    out = CliRunner().invoke(app, ["job", "history", job.name, "--api", suite.api_address])
    assert out.exit_code == 0, out.output
    header, first, second = out.stdout.splitlines()
    assert header.split() == ["#", "STATE", "WORKER", "TOKEN", "CLASS", "ERROR"]
    assert first.split()[:2] == ["1", "LOST"] and "AMBIGUOUS" in first and "lease expired" in first
    assert second.split()[:2] == ["2", "SUCCEEDED"] and second.split()[4:] == ["-", "-"]
    out = CliRunner().invoke(app, ["job", "history", job.id, "--json", "--api", suite.api_address])
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["attempt"], r["state"]) for r in rows] == [(1, "LOST"), (2, "SUCCEEDED")]
    assert all(r["fencing_token"] > 0 and r["worker_id"] and r["claim_time"] for r in rows)


def test_ack_lost_external_api_effect_charges_exactly_once(suite):
    with external_api_effect.PaymentsServer() as payments:
        run_ack_lost(
            suite,
            "charges",
            "gnomon_effect_handlers:external_api_then_crash",
            "examples.external_api_effect:handle",
            {"PAYMENTS_URL": payments.url},
            {"account": "bob", "amount_cents": 1999},
            key="order-43-charge",
        )
        assert payments.requests == 2  # attempt 1, and the retry (replayed)
        assert [(p["account"], p["amount_cents"], p["idempotency_key"]) for p in payments.payments] == [
            ("bob", 1999, "order-43-charge")
        ]  # charged once
