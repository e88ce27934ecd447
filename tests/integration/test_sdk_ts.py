"""The TypeScript SDK (libs/sdk-ts) against the real suite: a node script creates 50 jobs with the TS
``Client`` and drains them with the TS ``Worker`` (discovery from the API address, TLS with the session
CA, the admin API key from the environment, exactly as the Python SDK reads them). The database then
says every job SUCCEEDED with exactly one attempt.

Skipped only when ``node`` is not installed; a missing build (``scripts/bootstrap`` builds the package)
is a failure, not a skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gnomon_test_support import running_suite, sql

REPO = Path(__file__).resolve().parents[2]
SDK_TS = REPO / "libs" / "sdk-ts"
EXAMPLE = SDK_TS / "dist" / "examples" / "create-and-drain.js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not installed (the TypeScript SDK needs node >= 20)"
)


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("suite")) as s:
        yield s


def test_ts_client_creates_and_ts_worker_drains_fifty_jobs_exactly_once(suite):
    assert EXAMPLE.exists(), f"{EXAMPLE} is missing: run scripts/bootstrap (it builds libs/sdk-ts)"
    queue = f"ts-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **suite.client_env())
    assert env.get("GNOMON_INSECURE") != "true"  # the suite is secure: TLS + API key
    proc = subprocess.run(
        [NODE, str(EXAMPLE), queue, "50", "8"],
        env=env,
        cwd=SDK_TS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    created = out["created"]
    assert len(created) == len(set(created)) == 50
    assert out["succeeded"] == 50
    ids = [name.rsplit("/", 1)[1] for name in created]
    rows = sql(
        suite.database_url,
        "SELECT j.id::text, j.state, j.attempt, (SELECT count(*) FROM attempts a WHERE a.job_id = j.id) "
        "FROM jobs j WHERE j.queue = %s",
        queue,
    )
    assert sorted(r[0] for r in rows) == sorted(ids)
    assert {r[1] for r in rows} == {"SUCCEEDED"}
    assert {(r[2], r[3]) for r in rows} == {(1, 1)}  # exactly one attempt each


REJECT_SCRIPT = """
const { Client, GnomonError } = require("./dist/src");
const c = new Client();
c.createJob("Bad Queue", "{}").then(
  () => { console.log(JSON.stringify({ created: true })); c.close(); },
  (e) => {
    console.log(JSON.stringify({ gnomon: e instanceof GnomonError, code: e.codeName, reason: e.reason,
                                 fields: e.fieldViolations.map((v) => v.field) }));
    c.close();
  });
"""


def test_ts_client_decodes_the_servers_rich_status(suite):
    """A refused CreateJob surfaces as a GnomonError with the reason and field violations the API put in
    grpc-status-details-bin (decoded with the shipped google/rpc protos)."""
    env = dict(os.environ, **suite.client_env())
    proc = subprocess.run(
        [NODE, "-e", REJECT_SCRIPT], env=env, cwd=SDK_TS, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["gnomon"] is True
    assert got["code"] == "INVALID_ARGUMENT"
    assert got["reason"]  # an ErrorInfo reason, e.g. INVALID_ARGUMENT / INVALID_QUEUE
    assert any(f.endswith("queue") for f in got["fields"]), got


def test_ts_client_tour_every_call_against_the_api(suite):
    """Every Client wrapper (jobs, schedules, dead letters, queues) once against the real API: the
    example script libs/sdk-ts/examples/client-tour.ts reports what each call returned."""
    queue = f"tour-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **suite.client_env())
    proc = subprocess.run(
        [NODE, str(SDK_TS / "dist" / "examples" / "client-tour.js"), queue],
        env=env,
        cwd=SDK_TS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["created"] == {"state": "JOB_STATE_SCHEDULED", "maxAttempts": 3}
    assert got["requestIdDeduplicates"] is True
    assert got["batch"] == 3
    assert got["got"] == '{"hello":"world"}'
    assert got["rescheduled"] is True
    assert got["listed"] == 5  # later, the deduplicated one, 3 of the batch
    assert got["cancel"] == "CANCEL_OUTCOME_CANCELLED"
    assert got["attempts"] == 0
    assert got["notFound"] == "NOT_FOUND"
    assert got["schedule"] is True and got["scheduleGot"] is True
    assert got["schedulesListed"] == 1
    assert got["paused"] is True and got["resumed"] is True
    assert got["triggered"] is True
    assert got["withdrawn"] == 1  # deleting the schedule withdrew the triggered, pending occurrence
    assert got["deadLetters"] == 0 and got["replayDryRun"] is True
    assert got["queue"] == f"namespaces/default/queues/{queue}"
    assert got["rateLimit"] == {"rate": 5, "burst": 10}
    assert got["unlimited"] is True
    rows = sql(suite.database_url, "SELECT count(*) FROM jobs WHERE queue = %s", queue)
    assert rows[0][0] == 5  # the 5 created (the withdrawn occurrence is gone)
