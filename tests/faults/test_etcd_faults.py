"""etcd faults (docs/faults.md): one member of three lost under load, then quorum lost, then restored.

The suite runs on a three-member :class:`EtcdCluster` (:class:`ClusterSuite`: :class:`Suite` with
an etcd it is given instead of the one-member cluster it starts itself; every service gets the three
endpoints and balances over them round-robin).

1. Under a seeded load (jobs due over the next seconds), member 0 is SIGKILLed: claims continue and
   every job of the phase finishes.
2. Member 1 is killed too (1 of 3 left, no quorum): the dispatchers cannot renew their leases and
   stop claiming. Jobs created now (the API does not need etcd) stay visibly ``SCHEDULED``; no
   attempt is claimed later than ``TTL`` after the quorum was lost (database clock).
3. Members 0 and 1 are restarted: the dispatchers open new sessions, take the shards with larger
   tokens, claims resume, every job finishes, and the history checker finds no violation.
"""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta
from pathlib import Path

import pytest
from history import History, check, db_now, seeded_mix, worker_env

from gnomon.cli.suite import Suite, wait_healthy
from gnomon.cli.suite_auth import bootstrap_admin, ensure_credentials
from gnomon.devservers import EtcdCluster
from gnomon.sdk import Client
from gnomon_test_support import fast_failover, running_suite, sql, wait_for

pytestmark = pytest.mark.faults

TTL_S = 3
TERMINAL = "('SUCCEEDED','FAILED','DEAD','CANCELLED','EXPIRED')"


class ClusterSuite(Suite):
    """A :class:`Suite` on an etcd cluster owned by the caller (``external_etcd``), not stopped by it."""

    external_etcd: EtcdCluster | None = None

    def start(self) -> ClusterSuite:
        from gnomon.common.storage.migrations import upgrade

        self._own_dir = False
        assert self.base_dir is not None and self.database_url is not None, "given by the test"
        os.makedirs(self.base_dir, exist_ok=True)
        self.log_dir = os.path.join(self.base_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        upgrade(self.database_url)
        if not self.insecure:  # secure like any suite: TLS, the session's admin key in this database
            self.credentials = ensure_credentials(self.credentials_dir or os.path.join(self.base_dir, "auth"))
            bootstrap_admin(self.database_url, self.credentials)
        self.etcd = self.external_etcd
        self.start_service("api", self.api_listen)
        for _ in range(self.dispatchers):
            self.start_service("dispatcher")
        self.start_service("planner")
        self.start_service("reaper")
        ca = self.credentials.ca_file if self.credentials else None
        for p in self.procs:
            wait_healthy(p.address, ca_file=ca, insecure=ca is None or None)
        return self

    def stop(self) -> None:
        self.etcd = None  # the caller stops its cluster
        super().stop()


def pending(url, ids) -> int:
    return sql(url, f"SELECT count(*) FROM jobs WHERE id = ANY(%s) AND state NOT IN {TERMINAL}", ids)[0][0]


@pytest.mark.parametrize("seed", [23])
def test_member_loss_then_quorum_loss_then_recovery(pg_server, migrated_template, tmp_path, seed):
    rng = random.Random(seed)
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        start=False,
        suite_cls=ClusterSuite,
        dispatchers=2,
        env=fast_failover(TTL_S),
    ) as s:
        url = s.database_url
        cluster = EtcdCluster(3, str(tmp_path / "etcd")).start()
        s.external_etcd = cluster
        record = str(tmp_path / "runs.txt")
        h = History()
        figures = {}
        try:
            s.start()
            for _ in range(2):
                s.start_worker(["etcdq"], "history:run", concurrency=16, env=worker_env(record))
            wait_for(
                lambda: sql(url, "SELECT count(DISTINCT owner), count(*) FROM shard_owners")[0] == (2, 64),
                20,
                "two dispatchers sharing 64 shards",
            )
            with Client(api=s.api_address) as c:
                # 1. one member of three lost under load
                phase1 = [
                    c.create_job(
                        "etcdq", b"{}", delay=d, idempotent=True, lease_duration=timedelta(seconds=3)
                    )
                    for d in seeded_mix(rng, 150, max_delay_s=6)
                ]
                for j in phase1:
                    h.created(j, idempotent=True)
                cluster.kill_member(0)
                killed1 = db_now(url)
                t = time.monotonic()
                ids1 = [x.job_id for x in h.created_jobs]
                wait_for(lambda: pending(url, ids1) == 0, 30, "phase-1 jobs to finish with 2 of 3 members")
                figures["one_member_down_drain_s"] = time.monotonic() - t
                figures["claims_after_member_loss"] = sql(
                    url, "SELECT count(*) FROM attempts WHERE claimed_at > %s", killed1
                )[0][0]

                # 2. quorum lost
                cluster.kill_member(1)
                lost = db_now(url)
                t_lost = time.monotonic()
                mixed = [
                    c.create_job(
                        "etcdq", b"{}", delay=d, idempotent=True, lease_duration=timedelta(seconds=3)
                    )
                    for d in seeded_mix(rng, 30, max_delay_s=2)
                ]  # due while the leases still run out
                for j in mixed:
                    h.created(j, idempotent=True)
                disp = [p for p in s.procs if p.role == "dispatcher"]
                wait_for(
                    lambda: all(
                        "etcd lease not trusted any more" in Path(p.log_path).read_text() for p in disp
                    ),
                    TTL_S + 5,
                    "every dispatcher to stop trusting its lease",
                )
                figures["stop_trusting_s"] = time.monotonic() - t_lost
                n_before = len(h.created_jobs)
                phase2 = [
                    c.create_job(
                        "etcdq", b"{}", delay=d, idempotent=True, lease_duration=timedelta(seconds=3)
                    )
                    for d in seeded_mix(rng, 60, max_delay_s=1)
                ]  # created (API works) with no shard owner
                for j in phase2:
                    h.created(j, idempotent=True)
                ids2 = [x.job_id for x in h.created_jobs[n_before:]]
                # observe the outage until well past the lease: nothing may be claimed after lost + TTL
                horizon = lost + timedelta(seconds=TTL_S)
                observe_until = max(t_lost + TTL_S, time.monotonic()) + 2
                while time.monotonic() < observe_until:
                    late = sql(url, "SELECT count(*) FROM attempts WHERE claimed_at > %s", horizon)[0][0]
                    assert late == 0, f"{late} attempts claimed more than {TTL_S} s after quorum loss"
                    time.sleep(0.2)  # samples of the observation window (the invariant is checked throughout)
                figures["claims_during_outage_after_ttl"] = 0
                waiting = sql(
                    url, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND state = 'SCHEDULED'", ids2
                )[0][0]
                figures["visibly_pending_in_outage"] = waiting
                assert waiting == len(phase2)

                # 3. members restarted: claims resume, everything finishes
                cluster.restart_member(0, wait=False)
                cluster.restart_member(1, wait=False)
                t_restart = time.monotonic()
                cluster.wait_healthy(20)
                figures["quorum_back_s"] = time.monotonic() - t_restart
                wait_for(
                    lambda: (
                        sql(url, "SELECT count(*) FROM attempts WHERE claimed_at > %s", horizon)[0][0] > 0
                    ),
                    30,
                    "claims to resume",
                )
                figures["first_claim_after_restart_s"] = time.monotonic() - t_restart
                ids = [x.job_id for x in h.created_jobs]
                wait_for(lambda: pending(url, ids) == 0, 30, "every job to finish")
                figures["all_done_after_restart_s"] = time.monotonic() - t_restart
            tokens = sql(url, "SELECT min(acquired_at) > %s FROM shard_owners", lost)[0][0]
            h.collect(url, record)
            report = check(h)
            print(
                f"\nseed {seed}: "
                + ", ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
                )
                + f"; shards re-acquired: {tokens}\n{report}"
            )
            assert figures["claims_after_member_loss"] > 0
            assert tokens  # every shard was taken again after the outage
            assert report.ok, report
        finally:
            s.stop()  # before its etcd cluster goes (running_suite stops it again: a no-op)
            cluster.stop()
