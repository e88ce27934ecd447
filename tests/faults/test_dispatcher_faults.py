"""Dispatcher faults (docs/faults.md): a dispatcher paused (SIGSTOP) past its etcd lease while jobs are due.

Two dispatchers A and B share the 64 shards. A reaches PostgreSQL through a :class:`FaultProxy` in
``delay`` mode (each chunk 150 ms late each way), so its claim transactions take long enough to be
caught half-way: the test watches ``pg_stat_activity`` for A's backend sitting ``idle in
transaction`` right after the claim statement (``backend_xid`` set: it has claimed rows) and
SIGSTOPs A exactly there -- it holds its old tokens and is about to run the fence check. A stays
stopped until B owns every shard (etcd expired A's lease; B recorded larger tokens), then gets
SIGCONT: its pending transaction continues with the old tokens, the fence rejects it (counted on A's
``gnomon_fenced_writes_total``), nothing it claimed commits, and the checker finds no job run twice
under current tokens, none early, none lost.

Without catching A inside a transaction, a resumed dispatcher writes nothing at all: its
``LeaseKeeper`` deadline is monotonic, so on SIGCONT ``tokens()`` is already empty and no claim
starts (the first line of defence); the fence is the second, exercised here.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from faultproxy import FaultProxy
from history import History, check, metric, seeded_mix, worker_env

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client
from gnomon_test_support import fast_failover, running_suite, sql, wait_for

pytestmark = pytest.mark.faults

TTL_S = 3
SHARDS = 64


@pytest.mark.parametrize("seed,region_holder", [(5, "b"), (6, "a")])
def test_sigstop_past_lease_then_sigcont_is_fenced(
    pg_server, migrated_template, tmp_path, seed, region_holder
):
    """``region_holder="b"``: the shard fence rejects the resumed claim (A's transaction is kept
    alive across the pause: idle-in-transaction timeout 60 s). ``"a"`` (regression for the finding in
    docs/faults.md): A holds the region key and is paused inside a claim holding the region row's
    share lock; the database ends its session after the dispatcher's idle-in-transaction timeout
    (2 s here), so B's region and shard takeover completes anyway."""
    rng = random.Random(seed)
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        dispatchers=0,
        env=fast_failover(TTL_S),
    ) as s:
        url = s.database_url
        m = re.match(r"(postgresql\+psycopg://[^@]+@)([^/]+)(/.*)$", url)
        proxy = FaultProxy(m.group(2)).start()
        a_url = f"{m.group(1)}{proxy.address}{m.group(3)}?application_name=gnomon-disp-a"
        record = str(tmp_path / "runs.txt")
        a = None
        try:
            s.start()
            # B first, so that B holds the region key (region_owners): A's claim transactions take a shared
            # lock on that row, and a region owner paused inside one would block the region hand-over
            # itself (see docs/faults.md, "Findings"); this scenario is about the shard fence.
            idle_ms = "60000" if region_holder == "b" else "2000"
            a_env = {
                "GNOMON_DATABASE_URL": a_url,
                "GNOMON_DISPATCHER_ID": "disp-a",
                "GNOMON_DISPATCHER_IDLE_IN_TRANSACTION_TIMEOUT_MS": idle_ms,
            }
            first, second = (("disp-b", {"GNOMON_DISPATCHER_ID": "disp-b"}), ("disp-a", a_env))
            if region_holder == "a":
                first, second = second, first
            p1 = s.start_service("dispatcher", env=first[1])
            wait_healthy(p1.address)
            wait_for(
                lambda: sql(url, "SELECT owner FROM region_owners WHERE region = 'local'") == [(first[0],)],
                15,
                f"{first[0]} to own the region",
            )
            p2 = s.start_service("dispatcher", env=second[1])
            wait_healthy(p2.address)
            a, b = (p1, p2) if region_holder == "a" else (p2, p1)
            for _ in range(2):
                s.start_worker(["stop"], "history:run", concurrency=8, env=worker_env(record))
            wait_for(
                lambda: (
                    {
                        o: n for o, n in sql(url, "SELECT owner, count(*) FROM shard_owners GROUP BY owner")
                    }.get("disp-a", 0)
                    >= SHARDS // 2 - 4
                ),
                20,
                "A to own about half the shards",
            )
            proxy.set_mode("delay", delay_ms=150)

            h = History()
            with Client(api=s.api_address) as c:
                for d in seeded_mix(rng, 240, max_delay_s=10):
                    h.created(
                        c.create_job(
                            "stop", b"{}", delay=d, idempotent=True, lease_duration=timedelta(seconds=3)
                        ),
                        idempotent=True,
                    )
                # catch A between its claim statement and its fence check, holding no shard_owners row lock
                with psycopg.connect(
                    url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
                ) as mon:

                    def a_mid_claim():
                        return mon.execute(
                            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'gnomon-disp-a' "
                            "AND state = 'idle in transaction' AND backend_xid IS NOT NULL "
                            "AND query LIKE 'WITH tg AS%%'"  # the claim statement (storage.claims)
                        ).fetchone()

                    def a_locks_fence_rows():
                        return mon.execute(
                            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity x ON x.pid = l.pid "
                            "WHERE x.application_name = 'gnomon-disp-a' AND l.relation = 'shard_owners'::regclass "
                            "AND l.mode = 'RowExclusiveLock'"
                        ).fetchone()[0]

                    for tries in range(1, 11):  # noqa: B007 (reported below)
                        try:
                            wait_for(
                                lambda: a_mid_claim() and not a_locks_fence_rows(),
                                20,
                                "A inside a claim transaction",
                                interval_s=0.005,
                            )
                        except AssertionError:
                            print(
                                mon.execute(
                                    "SELECT application_name, state, backend_xid, left(query, 60) "
                                    "FROM pg_stat_activity"
                                ).fetchall()
                            )
                            raise
                        os.kill(a.popen.pid, signal.SIGSTOP)
                        time.sleep(0.4)  # bytes A sent just before the stop reach the server (150 ms proxy)
                        if a_mid_claim() and not a_locks_fence_rows():
                            break
                        # A had a fence check (claim or relay) in flight: resuming it now is harmless; try again.
                        # (Paused there, A would hold shard_owners row locks and block B's takeover until
                        # SIGCONT: the dispatcher's engine has no idle_in_transaction_session_timeout.)
                        os.kill(a.popen.pid, signal.SIGCONT)
                    else:
                        raise AssertionError("could not pause A between claim and fence check in 10 tries")
                stopped = time.monotonic()
                before = dict(sql(url, "SELECT shard, token FROM shard_owners WHERE owner = 'disp-a'"))
                try:
                    wait_for(
                        lambda: (
                            sql(url, "SELECT count(*) FROM shard_owners WHERE owner = 'disp-b'")[0][0]
                            == SHARDS
                        ),
                        15,
                        "B to take every shard",
                    )
                except AssertionError:
                    print(sql(url, "SELECT owner, count(*) FROM shard_owners GROUP BY 1"))
                    print(
                        sql(
                            url,
                            "SELECT pid, application_name, state, wait_event_type, wait_event, pg_blocking_pids(pid), "
                            "left(query, 80) FROM pg_stat_activity WHERE datname = current_database()",
                        )
                    )
                    print(Path(b.log_path).read_text()[-3000:])
                    raise
                handover_s = time.monotonic() - stopped
                after = dict(sql(url, "SELECT shard, token FROM shard_owners"))
                assert all(after[sh] > tok for sh, tok in before.items()), (before, after)
                os.kill(a.popen.pid, signal.SIGCONT)
                resumed = time.monotonic()
                if region_holder == "b":
                    fenced = wait_for(
                        lambda: metric(a.metrics_address, "gnomon_fenced_writes_total"),
                        15,
                        "A's pending claim to be rejected by the fence",
                    )
                else:  # A's session was ended by the database: nothing to fence
                    fenced = metric(a.metrics_address, "gnomon_fenced_writes_total")
                fenced_after_s = time.monotonic() - resumed
                proxy.set_mode("pass")  # the fault is over; A's database path is healthy again
                ids = [x.job_id for x in h.created_jobs]
                try:
                    wait_for(
                        lambda: (
                            sql(
                                url,
                                "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND state NOT IN "
                                "('SUCCEEDED','FAILED','DEAD','CANCELLED','EXPIRED')",
                                ids,
                            )[0][0]
                            == 0
                        ),
                        40,
                        "every job to finish",
                    )
                except AssertionError:
                    print(
                        sql(
                            url,
                            "SELECT state, shard, count(*) FROM jobs WHERE id = ANY(%s) GROUP BY 1, 2",
                            ids,
                        )
                    )
                    print(sql(url, "SELECT * FROM shard_owners ORDER BY shard"))
                    print(Path(a.log_path).read_text()[-4000:])
                    print(Path(b.log_path).read_text()[-4000:])
                    raise
            h.collect(url, record)
            report = check(h)
            log_a = Path(a.log_path).read_text()
            print(
                f"\nseed {seed}: hand-over {handover_s:.2f} s (SIGSTOP -> B owns all {SHARDS} shards), "
                f"A's fenced writes {fenced:.0f} (counted {fenced_after_s:.2f} s after SIGCONT), "
                f"log 'rejected by the fence' x{log_a.count('rejected by the fence')}, pause tries {tries}, proxy {dict(proxy.stats)}\n{report}"
            )
            if region_holder == "b":
                assert fenced > 0
            else:
                assert handover_s < TTL_S + 2 + 5  # lease TTL + idle-in-transaction timeout + scans
            assert report.ok, report
        finally:
            if a is not None and a.popen.poll() is None:
                os.kill(a.popen.pid, signal.SIGCONT)
            s.stop()  # before the proxy goes: dispatcher A drains through it (running_suite: no-op)
            proxy.stop()
