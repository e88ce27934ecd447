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
