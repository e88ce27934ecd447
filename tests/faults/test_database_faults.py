"""Database faults (docs/faults.md): injected serialization failures (SQLSTATE 40001) and a database outage.

40001 is injected on PostgreSQL by a test-only trigger (:data:`FAULT_SQL`): a statement-level
``BEFORE INSERT OR UPDATE OR DELETE`` trigger on ``jobs`` and ``attempts``. The injection is
deterministic per statement kind (table and operation: ``jobs_insert``, ``attempts_update``, ...), so
what a test sees does not depend on how the services happened to batch their work:

* the first ``first_n`` firings of each kind fail, whatever the timing: a kind that runs at all is
  hit at least ``first_n`` times (each failure re-runs the transaction, which fires the kind again);
* after them, the ``i``-th firing of a kind fails iff ``hashint8(seed + i - 1) mod 2^31 / 2^31 < p``
  (``p`` and ``first_n`` read from table ``gnomon_fault_40001``; ``seed`` is the start value of the
  kind's sequence ``gnomon_fault_40001_seq_<kind>``), so which firings of a kind fail is fixed by
  the seed, not by the interleaving of the kinds (:func:`drawn_failures` counts them).

Sequences ignore rollback, so ``gnomon_fault_40001_hits`` (and ``..._hits_<kind>``) counts every
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
CREATE TABLE gnomon_fault_40001 (p double precision NOT NULL, first_n bigint NOT NULL);
INSERT INTO gnomon_fault_40001 VALUES (0, 0);
CREATE SEQUENCE gnomon_fault_40001_hits;
CREATE SEQUENCE gnomon_fault_40001_seq_jobs_insert START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_insert;
CREATE SEQUENCE gnomon_fault_40001_seq_jobs_update START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_update;
CREATE SEQUENCE gnomon_fault_40001_seq_jobs_delete START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_jobs_delete;
CREATE SEQUENCE gnomon_fault_40001_seq_attempts_insert START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_insert;
CREATE SEQUENCE gnomon_fault_40001_seq_attempts_update START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_update;
CREATE SEQUENCE gnomon_fault_40001_seq_attempts_delete START {seed};
CREATE SEQUENCE gnomon_fault_40001_hits_attempts_delete;
CREATE FUNCTION gnomon_fault_40001() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  prob double precision;
  forced bigint;
  kind text := TG_TABLE_NAME || '_' || lower(TG_OP);
  n bigint;
BEGIN
  SELECT f.p, f.first_n INTO prob, forced FROM gnomon_fault_40001 f;
  IF prob > 0 OR forced > 0 THEN
    n := nextval('gnomon_fault_40001_seq_' || kind);
    -- the i-th firing of this kind is n = seed + i - 1: the first `forced` ones fail, then the draw
    IF n - {seed} < forced OR (hashint8(n) & 2147483647)::double precision / 2147483648.0 < prob THEN
      PERFORM nextval('gnomon_fault_40001_hits');
      PERFORM nextval('gnomon_fault_40001_hits_' || kind);
      RAISE EXCEPTION 'restart transaction: injected serialization failure on % (%)', TG_TABLE_NAME, kind
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


def install_faults(url: str, p: float, seed: int = 1, first_n: int = 0) -> None:
    """Installs the 40001 trigger in database ``url``: the first ``first_n`` firings of each statement
    kind fail, then each firing fails with probability ``p`` (a draw fixed by ``seed``)."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        c.execute(FAULT_SQL.format(seed=int(seed)))
        c.execute("UPDATE gnomon_fault_40001 SET p = %s, first_n = %s", (p, first_n))


def drawn_failures(url: str, p: float, seed: int, first_n: int, firings: int) -> int:
    """How many of the first ``firings`` firings of one statement kind the trigger fails, for
    ``p``, ``seed`` and ``first_n`` as installed: a lower bound of that kind's injected failures once
    it fired at least that often (the same hash as the trigger, computed by the database)."""
    from gnomon_test_support import sql

    [(n,)] = sql(
        url,
        "SELECT count(*) FROM generate_series(%s::bigint, %s::bigint) n WHERE n - %s < %s "
        "OR (hashint8(n) & 2147483647)::double precision / 2147483648.0 < %s",
        seed,
        seed + firings - 1,
        seed,
        first_n,
        p,
    )
    return n


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


async def test_each_statement_kind_fails_its_first_n_firings_however_few_statements_run(db_url, engine):
    """The injection does not depend on batching: one statement of a kind (as one claim of a whole
    batch would be) is still hit exactly ``first_n`` times; a kind already past its first ``first_n``
    firings is not forced again, and another kind has a count of its own."""
    from sqlalchemy import text

    from gnomon.common.storage import engine as engine_mod

    install_faults(db_url, 0.0, seed=11, first_n=3)
    calls = collections.Counter()

    def one(stmt: str):
        async def tx(c):
            calls[stmt] += 1
            await c.execute(text(stmt))

        return engine_mod.run_transaction(engine, tx, max_attempts=10, max_delay_s=0.01)

    noop_update = "UPDATE attempts SET error = error WHERE false"  # the trigger fires on 0 rows too
    await one(noop_update)
    assert (calls[noop_update], injected(db_url, "attempts_update")) == (4, 3)
    await one(noop_update)
    assert injected(db_url, "attempts_update") == 3  # past its first 3: p = 0 fails nothing more
    noop_delete = "DELETE FROM jobs WHERE false"
    await one(noop_delete)
    assert (calls[noop_delete], injected(db_url, "jobs_delete")) == (4, 3)
    assert injected(db_url) == 6
    # with p > 0 the draws of a kind are fixed by the seed: the 200-job run's first 200 creates see
    # 3 forced failures and 32 drawn ones, however the creates interleave with claims and results
    assert drawn_failures(db_url, 0.2, 7, 3, 200) == 35


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


#: The 200-job run: each statement kind's first FIRST_N_40001 firings fail, then P_40001 of them
#: (draws fixed by SEED_40001); FIRST_N_40001 stays well under run_transaction's 10 attempts.
P_40001, SEED_40001, FIRST_N_40001 = 0.2, 7, 3
#: The statement kinds the 200-job run must have hit (the suite's creates, claims and results).
KINDS_40001 = ("jobs_insert", "jobs_update", "attempts_insert", "attempts_update")


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
        install_faults(url, P_40001, seed=SEED_40001, first_n=FIRST_N_40001)
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
        per_op = {w: injected(url, w) for w in KINDS_40001}
        print(f"injected 40001s: {hits} {per_op}")
        # Every kind the suite runs (creates: jobs INSERT by the api; claims: jobs UPDATE + attempts
        # INSERT by the dispatcher; results: attempts UPDATE) failed its first FIRST_N_40001 firings,
        # however the dispatcher batched its claims; each failure re-ran the whole transaction.
        assert all(n >= FIRST_N_40001 for n in per_op.values()), per_op
        # 200 CreateJob calls fire jobs INSERT at least 200 times: at least the failures the seed
        # draws among the kind's first 200 firings were injected (and retried) there
        assert per_op["jobs_insert"] >= drawn_failures(url, P_40001, SEED_40001, FIRST_N_40001, 200) > 30
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
                        sql(
                            url, "SELECT count(*) FROM attempts WHERE queue = 'outage' AND state = 'RUNNING'"
                        )[0][0]
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
