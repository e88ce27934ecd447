"""Secure by default, with real processes: a service without TLS refuses to start unless
``GNOMON_INSECURE=true`` (then it says so in its log); the suite serves TLS, so a plaintext client
cannot talk to it; health answers anyone over TLS while GetJob without an API key is UNAUTHENTICATED;
the suite's admin key (in its profile) works; an insecure suite serves plaintext clients."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.sdk import Client, GnomonError
from gnomon.sdk.connection import resolve
from gnomon_test_support import running_suite

pytestmark = pytest.mark.integration

GNOMON = [sys.executable, "-m", "gnomon.cli.main"]
MISSING = "namespaces/default/jobs/00000000-0000-4000-8000-000000000000"


def _service_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    env.update(
        GNOMON_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/none",
        GNOMON_ETCD_ENDPOINTS="127.0.0.1:1",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def test_a_service_without_tls_refuses_to_start() -> None:
    r = subprocess.run(
        [*GNOMON, "reaper", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_service_env(),
    )
    assert r.returncode == 2, r.stderr
    assert "refusing to start without TLS" in r.stderr and "GNOMON_INSECURE=true" in r.stderr
    assert r.stderr.count("\n") == 1  # one line, no traceback


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("secure")) as s:
        yield s


def test_a_plaintext_client_cannot_talk_to_the_suite(suite) -> None:
    with Client(api=suite.api_address, insecure=True, timeout=5) as c, pytest.raises(GnomonError) as err:
        c.get_job(MISSING)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE


def test_without_a_key_health_answers_but_get_job_is_unauthenticated(suite, tmp_path: Path) -> None:
    creds = suite.credentials
    assert creds is not None
    no_key = resolve(
        suite.api_address, ca_file=creds.ca_file, config_file=str(tmp_path / "none.toml"), environ={}
    )
    assert no_key.api_key is None
    with no_key.channel() as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    # the same CA, no key (no profile, no GNOMON_API_KEY): refused before the servicer runs
    env_without_key = {"GNOMON_CONFIG_FILE": str(tmp_path / "none.toml"), "GNOMON_TLS_CA_FILE": creds.ca_file}
    r = subprocess.run(
        [*GNOMON, "job", "get", MISSING, "--api", suite.api_address],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}, **env_without_key},
    )
    assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr, r.stderr


def test_the_suite_profile_needs_no_other_setting(suite, monkeypatch) -> None:
    assert suite.profile_file is not None
    monkeypatch.setenv("GNOMON_CONFIG_FILE", suite.profile_file)
    with Client() as c, pytest.raises(GnomonError) as err:
        assert c.api == suite.api_address and c._async.connection.profile == "suite"
        c.get_job(MISSING)
    assert err.value.code == grpc.StatusCode.NOT_FOUND  # authenticated and authorized: the job is missing


def test_an_insecure_suite_serves_plaintext_and_says_so(pg_server, migrated_template, tmp_path) -> None:
    with running_suite(pg_server, migrated_template, tmp_path, insecure=True) as s:
        assert s.credentials is None
        with Client(api=s.api_address, insecure=True) as c, pytest.raises(GnomonError) as err:
            c.get_job(MISSING)
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        api_log = next(p.log_path for p in s.procs if p.role == "api")
        assert "INSECURE" in Path(api_log).read_text()
