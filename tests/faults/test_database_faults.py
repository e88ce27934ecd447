"""Database faults (docs/faults.md): injected serialization failures (SQLSTATE 40001) and a database outage.

40001 is injected on PostgreSQL by a test-only trigger (:data:`FAULT_SQL`): a statement-level
``BEFORE INSERT OR UPDATE OR DELETE`` trigger on ``jobs`` and ``attempts`` that raises 40001 with
probability ``p`` (read from table ``gnomon_fault_40001``). The draw is deterministic: the
``n``-th trigger firing fails iff ``hashint8(n) mod 2^31 / 2^31 < p``, ``n`` from a sequence (the seed
is its start value). Sequences ignore rollback, so ``gnomon_fault_40001_hits`` counts every
injected failure, including those in retried transactions.

The outage test stops the suite's own PostgreSQL (``pg_ctl stop -m immediate``, same port and
data) and starts it again (:meth:`PostgresServer.stop_server` / :meth:`start_again`).

This module also serves as a worker handler module (``test_database_faults:slow_record``).
"""

from __future__ import annotations

import collections
import os
import time
from datetime import timedelta

import grpc
import pytest

from gnomon.sdk.connection import open_channel

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS_DIR = os.path.dirname(os.path.abspath(__file__))

FAULT_SQL = """
CREATE TABLE gnomon_fault_40001 (p double precision NOT NULL);
INSERT INTO gnomon_fault_40001 VALUES (0);
CREATE SEQUENCE gnomon_fault_40001_seq START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits;
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_insert;
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_update;
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_delete;
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_insert;
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_update;
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_delete;
CREATE FUNCTION gnomon_fault_40001() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  prob double precision;
  n bigint;
BEGIN
  SELECT f.p INTO prob FROM gnomon_fault_40001 f;
  IF prob > 0 THEN
    n := nextval('gnomon_fault_40001_seq');
    IF (hashint8(n) & 2147483647)::double precision / 2147483648.0 < prob THEN
      PERFORM nextval('gnomon_fault_40001_hits');
      PERFORM nextval(format('gnomon_fault_40001_hits_%s_%s', TG_TABLE_NAME, lower(TG_OP)));
      RAISE EXCEPTION 'restart transaction: injected serialization failure on %', TG_TABLE_NAME
        USING ERRCODE = '40001';
    END IF;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER gnomon_fault_40001 BEFORE INSERT OR UPDATE OR DELETE ON jobs
  FOR EACH STATEMENT EXECUTE FUNCTION gnomon_fault_40001();
CREATE TRIGGER gnomon_fault_40001 BEFORE INSERT OR UPDATE OR DELETE ON attempts
  FOR EACH STATEMENT EXECUTE FUNCTION gnomon_fault_40001();
"""


def slow_record(ctx) -> None:
    """Worker handler: holds the job for ``$GNOMON_TEST_HOLD_S`` seconds, then records it like
    ``gnomon_test_handlers.record``."""
    import gnomon_test_handlers

    time.sleep(float(os.environ.get("GNOMON_TEST_HOLD_S", "0")))
    gnomon_test_handlers.record(ctx)


def install_faults(url: str, p: float, seed: int = 1) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        c.execute(FAULT_SQL.format(seed=seed))
        c.execute("UPDATE gnomon_fault_40001 SET p = %s", (p,))


def set_fault_probability(url: str, p: float) -> None:
    from gnomon_test_support import sql

    sql(url, "UPDATE gnomon_fault_40001 SET p = %s RETURNING p", p)


def injected(url: str, which: str = "") -> int:
    """Number of 40001s injected so far (``which``: e.g. ``"jobs_update"``; all by default)."""
    from gnomon_test_support import sql

    [(last, called)] = sql(
        url, f"SELECT last_value, is_called FROM gnomon_fault_40001_hits{'_' + which if which else ''}"
    )
    return last if called else 0


# -- run_transaction against the trigger ----------------------------------------------------------


@pytest.fixture
def faulty(db_url, engine):
    install_faults(db_url, 0.0)
    return db_url, engine


def _new_job(queue: str):
    from gnomon_test_support import new_job_spec

    return new_job_spec(queue=queue)


async def test_run_transaction_retries_injected_40001_and_writes_exactly_once(faulty, monkeypatch):
    from gnomon.common.storage import engine as engine_mod
    from gnomon.common.storage import jobs as jobs_store
    from gnomon_test_support import sql

    url, engine = faulty
    set_fault_probability(url, 0.5)
    bounds = []
    real_uniform = engine_mod.random.uniform
    monkeypatch.setattr(
        engine_mod.random, "uniform", lambda a, b: bounds.append((a, b)) or real_uniform(a, b)
    )
    calls = collections.Counter()
    n = 40
    for _ in range(n):
        new = _new_job("retry40001")

        async def tx(c, new=new):
            calls[new.id] += 1
            return await jobs_store.insert_job(c, new)

        row, created = await engine_mod.run_transaction(engine, tx, max_attempts=30, max_delay_s=0.02)
        assert created and row["id"] == new.id
    hits = injected(url)
    assert sum(calls.values()) == n + hits  # every injected failure cost exactly one re-run
    assert hits >= n // 4  # ~50 % of attempts failed (deterministic draw)
    assert max(calls.values()) >= 3  # some needed several re-runs
    # every job written exactly once, nothing half-written by a failed attempt
    rows = sql(url, "SELECT id, count(*) FROM jobs WHERE queue = 'retry40001' GROUP BY id")
    assert {r[0] for r in rows} == set(calls) and {r[1] for r in rows} == {1}
    # capped, jittered backoff: the k-th retry draws from [0, min(cap, base * 2**k)]
    assert len(bounds) == hits
    assert all(a == 0 and 0 < b <= 0.02 for a, b in bounds)
    assert (0, 0.01) in bounds and (0, 0.02) in bounds  # exponential growth up to the cap


async def test_run_transaction_gives_up_after_max_attempts_and_writes_nothing(faulty):
    from sqlalchemy.exc import OperationalError

    from gnomon.common.errors import Unavailable
    from gnomon.common.storage import engine as engine_mod
    from gnomon.common.storage import jobs as jobs_store
    from gnomon_test_support import sql

    url, engine = faulty
    set_fault_probability(url, 1.0)
    calls = 0
    new = _new_job("always40001")

    async def tx(c):
        nonlocal calls
        calls += 1
        return await jobs_store.insert_job(c, new)

    t0 = time.monotonic()
    with pytest.raises(OperationalError) as ei:
        await engine_mod.run_transaction(engine, tx, max_attempts=4, base_delay_s=0.005, max_delay_s=0.05)
    elapsed = time.monotonic() - t0
    assert not isinstance(ei.value, Unavailable)
    assert engine_mod.sqlstate(ei.value) == "40001"
    assert calls == 4 and injected(url) == 4
    assert elapsed < 1.0  # three sleeps, each <= 0.05 s
    assert sql(url, "SELECT count(*) FROM jobs WHERE queue = 'always40001'")[0][0] == 0
    # the API maps the exhausted retry to a retryable status, not INTERNAL
    from gnomon.common.rpc.errors import classify

    assert classify(ei.value).code.name == "UNAVAILABLE"


# -- real processes ---------------------------------------------------------------------------------


def _worker_env(record: str, **extra) -> dict:
    return {"GNOMON_TEST_RECORD": record, "PYTHONPATH": os.pathsep.join([TESTS_DIR, FAULTS_DIR]), **extra}


@pytest.mark.timeout(120)
def test_suite_under_20_percent_injected_40001_runs_200_jobs_exactly_once(
    pg_server, migrated_template, tmp_path
):
    from gnomon.sdk import Client
    from gnomon_test_support import records, running_suite, sql, wait_for

    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1"},
    ) as s:
        url = s.database_url
        install_faults(url, 0.2, seed=7)
        record = str(tmp_path / "r40001.txt")
        s.start()
        s.start_worker(["r40001"], "gnomon_test_handlers:record", concurrency=32, env=_worker_env(record))
        with Client(api=s.api_address) as c:
            names = {c.create_job("r40001", b"").name for _ in range(200)}
        assert len(names) == 200
        wait_for(
            lambda: (
                sql(url, "SELECT count(*) FROM jobs WHERE queue = 'r40001' AND state = 'SUCCEEDED'")[0][0]
                == 200
            ),
            90,
            "200 jobs SUCCEEDED",
        )
        time.sleep(0.5)  # let any duplicate execution show up before counting
        counts = collections.Counter(r[0] for r in records(record))
        assert set(counts) == names and max(counts.values()) == 1
        assert sql(
            url,
            "SELECT count(*), max(a.attempt) FROM attempts a JOIN jobs j ON j.id = a.job_id "
            "WHERE j.queue = 'r40001'",
        )[0] == (200, 1)
        hits = injected(url)
        per_op = {
            w: injected(url, w) for w in ("jobs_insert", "jobs_update", "attempts_insert", "attempts_update")
        }
        print(f"injected 40001s: {hits} {per_op}")
        assert hits > 50  # the trigger really fired, often
        # ... on creates (api), claims (dispatcher: jobs UPDATE + attempts INSERT) and results (attempts UPDATE)
        assert all(per_op.values()), per_op
        for p in s.procs:  # no service died of a 40001
            assert p.popen.poll() is None, f"{p.role} exited: see {p.log_path}"


def _health(address: str) -> int | None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with open_channel(address) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0).status
        except grpc.RpcError:
            return None


@pytest.mark.timeout(120)
def test_database_outage_fails_fast_turns_not_serving_and_recovers(tmp_path):
    from grpc_health.v1 import health_pb2

    from gnomon.sdk import Client, GnomonError
    from gnomon_test_support import records, running_suite, sql, wait_for

    SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    # no pg_server: the suite runs its own PostgreSQL (in a temp dir the postgres OS user can traverse)
    with running_suite(
        None, None, tmp_path, start=False, env={"GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "1"}
    ) as s:
        record = str(tmp_path / "outage.txt")
        figures = {}
        try:
            s.start()
            url = s.database_url
            s.start_worker(
                ["outage"],
                "test_database_faults:slow_record",
                concurrency=16,
                env=_worker_env(record, GNOMON_TEST_HOLD_S="3"),
            )
            with Client(api=s.api_address, timeout=10) as c:
                held = [c.create_job("outage", b"").name for _ in range(5)]  # running during the outage
                later = [
                    c.create_job("outage", b"", delay=timedelta(seconds=4)).name for _ in range(5)
                ]  # due during it
                wait_for(
                    lambda: (
                        sql(url, "SELECT count(*) FROM jobs WHERE queue = 'outage' AND state = 'RUNNING'")[0][
                            0
                        ]
                        == 5
                    ),
                    15,
                    "5 jobs held by the worker",
                )

                t_down = time.monotonic()
                s.pg.stop_server("immediate")
                figures["pg_stop_s"] = round(time.monotonic() - t_down, 3)
                # CreateJob fails fast with UNAVAILABLE, every time (never accepted into memory)
                for _ in range(3):
                    t0 = time.monotonic()
                    with pytest.raises(GnomonError) as ei:
                        c.create_job("outage", b"")
                    took = time.monotonic() - t0
                    assert ei.value.code == grpc.StatusCode.UNAVAILABLE, ei.value
                    assert took < 6.0, took
                    figures.setdefault("create_unavailable_s", []).append(round(took, 3))
                with pytest.raises(GnomonError) as ei:
                    c.get_job(held[0])
                assert ei.value.code == grpc.StatusCode.UNAVAILABLE
                wait_for(lambda: _health(s.api_address) == NOT_SERVING, 8, "api NOT_SERVING")
                figures["not_serving_after_s"] = round(time.monotonic() - t_down, 3)
                for p in s.procs:
                    if p.role in ("planner", "reaper"):
                        wait_for(lambda p=p: _health(p.address) == NOT_SERVING, 8, f"{p.role} NOT_SERVING")
                # workers finish what they hold: the handlers complete while the database is down
                wait_for(lambda: len(records(record)) >= 5, 10, "held jobs finished by the worker")
                time.sleep(1.0)  # keep the database down a little after the results were produced

                s.pg.start_again()
                t_up = time.monotonic()
                wait_for(lambda: _health(s.api_address) == SERVING, 15, "api SERVING again")
                figures["serving_again_after_s"] = round(time.monotonic() - t_up, 3)
                t0 = time.monotonic()
                new = wait_for(lambda: _try_create(c, "outage"), 15, "CreateJob to succeed again")
                figures["create_ok_after_s"] = round(time.monotonic() - t_up, 3)
                done = wait_for(
                    lambda: (j := c.get_job(new.name)).state == "SUCCEEDED" and j, 30, "new job SUCCEEDED"
                )
                figures["new_job_succeeded_after_s"] = round(time.monotonic() - t_up, 3)
                assert done.attempt == 1
                for n in held + later:
                    wait_for(lambda n=n: c.get_job(n).state == "SUCCEEDED", 45, f"{n} SUCCEEDED")
                figures["all_succeeded_after_s"] = round(time.monotonic() - t_up, 3)
            counts = collections.Counter(r[0] for r in records(record))
            assert set(counts) == set(held + later + [new.name])  # nothing lost, nothing extra
            figures["executions"] = dict(collections.Counter(counts.values()))
            assert max(counts[n] for n in later + [new.name]) == 1
            # the 3 rejected creates left no rows
            assert sql(url, "SELECT count(*) FROM jobs WHERE queue = 'outage'")[0][0] == 11
            for p in s.procs:
                assert p.popen.poll() is None, f"{p.role} exited during the outage: see {p.log_path}"
        finally:
            print("database outage figures:", figures)
            s.pg and s.pg.start_again()


def _try_create(c, queue):
    from gnomon.sdk import GnomonError

    try:
        return c.create_job(queue, b"")
    except GnomonError as e:
        if e.code == grpc.StatusCode.UNAVAILABLE:
            return None
        raise
