"""A dispatcher lost under running attempts (docs/operations.md, "A dispatcher died"): real processes,
two dispatchers A and B, one worker.

A delivers N attempts whose handlers run longer than it takes to kill A (``history:run`` with a
``sleep`` payload, leases of a few seconds); the worker then also connects to B; A is killed with
SIGKILL while the handlers run. The worker heartbeats those attempts and reports their results
through its stream to B (gnomon.sdk.routing), so every job SUCCEEDED with exactly one attempt --
the one A delivered --, none LOST or DEAD (half the jobs are not idempotent: a lost attempt would
make them DEAD), each run once. ``restart=False``: A stays dead. ``restart=True``: a 3 s lease and A
restarted on the same address while the handlers still run. ``lang="ts"``: the worker is the
TypeScript SDK's (``history_worker.js``, the twin of ``history:run``), which must route the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from datetime import timedelta

import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client
from gnomon_test_support import fast_failover, running_suite, sql, wait_for

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history import History, check, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.faults]

N = 6
#: The TypeScript SDK's twin of ``history:run``.
TS_HISTORY_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "history_worker.js")
SLEEP_S = 15  # longer than starting B, proving the worker's stream to B and killing A


def _attempts(url: str, ids: list[str]) -> list[tuple]:
    return sql(
        url,
        "SELECT job_id::text, attempt, state, dispatcher_id FROM attempts WHERE job_id::text = ANY(%s) "
        "ORDER BY job_id, attempt",
        ids,
    )


@pytest.mark.parametrize(
    "restart,lease_s,lang",
    # the TypeScript worker in the harder case only (its dispatcher never comes back), for CI time
    [(False, 5, "python"), (True, 3, "python"), (False, 5, "ts")],
)
def test_running_attempts_survive_the_loss_of_their_dispatcher(
    pg_server, migrated_template, tmp_path, restart, lease_s, lang
):
    if lang == "ts" and shutil.which("node") is None:
        pytest.skip("node is not installed (the TypeScript SDK needs node >= 20)")
    with running_suite(
        pg_server, migrated_template, tmp_path, start=False, dispatchers=0, env=fast_failover(3)
    ) as s:
        s.start()
        url = s.database_url
        a = s.start_service("dispatcher", env={"GNOMON_DISPATCHER_ID": "disp-a"})
        wait_healthy(a.address)
        wait_for(
            lambda: sql(url, "SELECT count(*) FROM shard_owners WHERE owner = 'disp-a'")[0][0] > 0, 20, "A"
        )
        record = str(tmp_path / "runs.txt")
        if lang == "ts":
            worker = s.start_worker_command(["node", TS_HISTORY_WORKER, "32", "loss"], env=worker_env(record))
        else:
            worker = s.start_worker(["loss"], "history:run", concurrency=32, env=worker_env(record))
        h = History()
        with Client(api=s.api_address) as c:
            for i in range(N):
                idempotent = i % 2 == 0
                h.created(
                    c.create_job(
                        "loss",
                        json.dumps({"sleep": SLEEP_S}).encode(),
                        idempotent=idempotent,
                        lease_duration=timedelta(seconds=lease_s),
                    ),
                    idempotent=idempotent,
                )
            ids = [str(x.job_id) for x in h.created_jobs]
            # every attempt delivered by A and accepted: the handlers are running
            wait_for(
                lambda: (
                    sql(
                        url,
                        "SELECT count(*) FROM attempts WHERE job_id::text = ANY(%s) AND state = 'RUNNING' "
                        "AND dispatcher_id = 'disp-a'",
                        ids,
                    )
                    == [(N,)]
                ),
                20,
                "A's attempts to run",
            )
            b = s.start_service("dispatcher", env={"GNOMON_DISPATCHER_ID": "disp-b"})
            wait_healthy(b.address)
            # the worker's stream to B is live once a job is delivered by B
            probes: list[str] = []

            def b_delivered() -> bool:
                probe = c.create_job("loss", b"{}", idempotent=True)
                h.created(probe, idempotent=True)  # the checker sees these runs too
                probes.append(probe.name.rsplit("/", 1)[1])
                return bool(
                    sql(
                        url,
                        "SELECT count(*) FROM attempts WHERE job_id::text = ANY(%s) AND dispatcher_id = 'disp-b' "
                        "AND state = 'SUCCEEDED'",
                        probes,
                    )[0][0]
                )

            wait_for(b_delivered, 30, "a job delivered by B", interval_s=0.5)
            assert sql(
                url,
                "SELECT count(*) FROM attempts WHERE job_id::text = ANY(%s) AND state = 'RUNNING'",
                ids,
            ) == [(N,)], "the handlers ended before A was killed: raise SLEEP_S"
            s.stop_proc(a, signal.SIGKILL)
            assert a.popen.returncode == -9
            if restart:
                a2 = s.start_service("dispatcher", listen=a.address, env={"GNOMON_DISPATCHER_ID": "disp-a2"})
                wait_healthy(a2.address)
            wait_for(
                lambda: (
                    sql(
                        url,
                        "SELECT count(*) FROM jobs WHERE id::text = ANY(%s) AND state IN "
                        "('SUCCEEDED','DEAD','CANCELLED','EXPIRED')",
                        ids + probes,
                    )
                    == [(N + len(probes),)]
                ),
                SLEEP_S + 30,
                "every job to end",
            )
        s.stop_proc(worker)
        states = sql(url, "SELECT state, count(*) FROM jobs WHERE id::text = ANY(%s) GROUP BY state", ids)
        atts = _attempts(url, ids)
        counts = {
            "jobs": N,
            "succeeded": dict(states).get("SUCCEEDED", 0),
            "attempts": len(atts),
            "lost": sum(1 for x in atts if x[2] == "LOST"),
            "dead": dict(states).get("DEAD", 0),
        }
        print("dispatcher loss", "restart" if restart else "for good", lang, counts)
        assert states == [("SUCCEEDED", N)], (states, atts)
        # exactly one attempt per job, the one A delivered, SUCCEEDED
        assert sorted(atts) == sorted((j, 1, "SUCCEEDED", "disp-a") for j in ids), atts
        report = check(h.collect(url, record))
        assert report.ok, report
        runs = [e for e in h.executions if str(e["job_id"]) in ids]
        assert len(runs) == N and len({e["job_id"] for e in runs}) == N  # each ran once
