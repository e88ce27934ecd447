"""Configuration: unknown ``GNOMON_*`` variables and invalid values are refused at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gnomon.common.config import DispatcherSettings
from gnomon.common.config_check import SETTINGS_CLASSES, ConfigError, check_environment, known_variables


def test_a_typo_is_refused_with_a_did_you_mean(env):
    env.setenv("GNOMON_DISPATCHER_HEARTBEAT_INTERVALS", "1")
    with pytest.raises(ConfigError) as e:
        check_environment()
    assert str(e.value) == (
        "unknown environment variable GNOMON_DISPATCHER_HEARTBEAT_INTERVALS; "
        "did you mean GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S?"
    )


def test_a_misspelt_prefix_is_refused_too(env):
    env.setenv("GNOMON_REAPR_INTERVAL_S", "1")
    with pytest.raises(
        ConfigError, match=r"GNOMON_REAPR_INTERVAL_S; did you mean GNOMON_REAPER_INTERVAL_S\?$"
    ):
        check_environment()


def test_a_name_like_nothing_known_is_refused_without_a_guess(env):
    env.setenv("GNOMON_ZZZZZZZZZZZZZZZZZZ", "1")
    with pytest.raises(
        ConfigError,
        match=r"^unknown environment variable GNOMON_ZZZZZZZZZZZZZZZZZZ \(see docs/operations.md, Settings\)$",
    ):
        check_environment()


def test_a_valid_set_loads(env):
    for k, v in {
        "GNOMON_DATABASE_URL": "postgresql://u@127.0.0.1:5432/gnomon",
        "GNOMON_ETCD_ENDPOINTS": "127.0.0.1:2379,127.0.0.1:2380",
        "GNOMON_REGION": "eu-west",
        "GNOMON_LISTEN": "127.0.0.1:0",
        "GNOMON_DISPATCHER_HEARTBEAT_INTERVAL_S": "0.5",
        "GNOMON_DISPATCHER_ID": "d1",
        "GNOMON_LOG_LEVEL": "debug",
        "GNOMON_OTLP_INSECURE": "false",
        "GNOMON_FAULTS": "crash_after_claim",
        "GNOMON_API": "127.0.0.1:7071",
        "GNOMON_PG_INITDB_CACHE": "0",
        "GNOMON_TEST_RECORD": "/tmp/x",  # reserved for test harnesses
    }.items():
        env.setenv(k, v)
    check_environment()
    d = DispatcherSettings()
    assert (d.heartbeat_interval_s, d.id) == (0.5, "d1")


def test_an_invalid_value_is_refused_naming_the_variable(env):
    env.setenv("GNOMON_ETCD_LEASE_TTL_S", "1")
    with pytest.raises(ConfigError) as e:
        check_environment()
    assert (
        str(e.value)
        == "invalid GNOMON_ETCD_LEASE_TTL_S (got '1'): Input should be greater than or equal to 2"
    )


def test_a_value_of_the_wrong_type_is_refused_naming_the_variable(env):
    env.setenv("GNOMON_DISPATCHER_CLAIM_BATCH", "many")
    with pytest.raises(ConfigError, match=r"^invalid GNOMON_DISPATCHER_CLAIM_BATCH \(got 'many'\): "):
        check_environment()


def test_a_database_url_is_not_echoed_in_the_error(env):
    env.setenv("GNOMON_DATABASE_URL", "mysql://user:secret@host/db")
    with pytest.raises(ConfigError) as e:
        check_environment()
    assert str(e.value).startswith("invalid GNOMON_DATABASE_URL: ")
    assert "secret" not in str(e.value)


def test_every_tunable_has_a_default_and_a_description():
    for cls in SETTINGS_CLASSES:
        for name, field in cls.model_fields.items():
            assert not field.is_required(), f"{cls.__name__}.{name} has no default"
            assert field.description, f"{cls.__name__}.{name} has no description"
    assert len(known_variables()) == sum(len(c.model_fields) for c in SETTINGS_CLASSES)  # no name twice


def test_the_cli_refuses_a_typo_with_one_line(env):
    e = dict(os.environ, GNOMON_REGOIN="eu")
    r = subprocess.run(
        [sys.executable, "-m", "gnomon.cli.main", "job", "--help"],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr == "gnomon: unknown environment variable GNOMON_REGOIN; did you mean GNOMON_REGION?\n"
