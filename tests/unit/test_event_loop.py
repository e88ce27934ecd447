"""GNOMON_EVENT_LOOP: the services' and ``gnomon worker``'s event loop (uvloop by default)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import uvloop

from gnomon.common.config_check import ConfigError, check_environment
from gnomon.common.event_loop import loop_factory, run, running_loop_name


def test_uvloop_is_the_default(env):
    assert loop_factory() is uvloop.new_event_loop


def test_asyncio_selects_the_standard_loop(env):
    env.setenv("GNOMON_EVENT_LOOP", "asyncio")
    assert loop_factory() is None


@pytest.mark.parametrize("value", ["uvloop", "asyncio"])
def test_run_runs_the_coroutine_on_the_chosen_loop(env, value):
    env.setenv("GNOMON_EVENT_LOOP", value)
    seen = []

    async def main() -> None:
        seen.append((asyncio.get_running_loop(), running_loop_name()))

    run(main())
    [(loop, name)] = seen
    assert name == value
    assert isinstance(loop, uvloop.Loop) == (value == "uvloop")


def test_an_unknown_loop_is_refused_at_start_with_one_line(env):
    env.setenv("GNOMON_EVENT_LOOP", "trio")
    with pytest.raises(ConfigError) as e:
        check_environment()
    assert "GNOMON_EVENT_LOOP" in str(e.value) and "\n" not in str(e.value)


def test_gnomon_refuses_it_before_any_command_runs():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    p = subprocess.run(
        [sys.executable, "-m", "gnomon.cli.main", "health", "--help"],
        env={**env, "GNOMON_EVENT_LOOP": "trio"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "gnomon: invalid GNOMON_EVENT_LOOP" in p.stderr
