"""Shard ownership through the API and the CLI (``ListShards``, ``gnomon shards``) and the dev
suite's process listing (``gnomon dev --regions``, ``gnomon dev status``), with real processes.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from gnomon.devservers import free_port
from gnomon.sdk import Client, Shard
from gnomon_test_support import running_suite, wait_for

SHARDS = 64
GNOMON = [sys.executable, "-m", "gnomon.cli.main"]


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([*GNOMON, *args], capture_output=True, text=True, timeout=timeout)


def balanced(shards: Sequence[Shard | SimpleNamespace], owners: set[str]) -> bool:
    """All shards owned by exactly ``owners``, about evenly, each token recorded in the database."""
    counts = collections.Counter(s.owner for s in shards if s.owned)
    lo, hi = SHARDS / len(owners) - 2, SHARDS / len(owners) + 2
    return (
        len(shards) == SHARDS
        and all(s.owned for s in shards)
        and set(counts) == owners
        and all(lo <= n <= hi for n in counts.values())
        and all(s.fencing_token == s.recorded_token > 0 for s in shards)
    )


@pytest.fixture
def suite(pg_server, migrated_template, tmp_path):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path,
        dispatchers=3,
        env={"GNOMON_ETCD_LEASE_TTL_S": "2", "GNOMON_DISPATCHER_SHARD_SCAN_S": "0.3"},
    ) as s:
        yield s


def test_list_shards_shows_owners_and_tokens_and_the_hand_over_after_kill_9(suite):
    with Client(api=suite.api_address) as c:
        dispatchers = {d.dispatcher_id: d.address for d in c.list_dispatchers()}
        assert len(dispatchers) == 3
        shards = wait_for(
            lambda: (x := c.list_shards()) and balanced(x, set(dispatchers)) and x,
            30,
            "64 shards owned by the 3 dispatchers, balanced, tokens recorded",
        )
        assert [s.shard for s in shards] == list(range(SHARDS))
        assert {s.region for s in shards} == {"local"}
        assert all(s.acquire_time is not None for s in shards)
        assert len({s.fencing_token for s in shards}) == SHARDS  # one etcd revision per key

        out = cli("shards", "--json", "--api", suite.api_address)
        assert out.returncode == 0, out.stderr
        printed = json.loads(out.stdout)
        assert [
            {k: p[k] for k in ("region", "shard", "owner", "fencing_token", "recorded_token", "owned")}
            for p in printed
        ] == [
            {
                k: getattr(s, k)
                for k in ("region", "shard", "owner", "fencing_token", "recorded_token", "owned")
            }
            for s in shards
        ]
        table = cli("shards", "--api", suite.api_address)
        assert table.returncode == 0 and "64/64 shards owned by 3 dispatcher(s)" in table.stdout

        victim_id = sorted(dispatchers)[0]
        victim = next(
            p for p in suite.procs if p.role == "dispatcher" and p.address == dispatchers[victim_id]
        )
        before = {s.shard: s.fencing_token for s in shards if s.owner == victim_id}
        victim.popen.send_signal(signal.SIGKILL)
        victim.popen.wait(10)
        survivors = set(dispatchers) - {victim_id}
        after = wait_for(
            lambda: (x := c.list_shards()) and balanced(x, survivors) and x,
            30,
            "the victim's shards re-owned by the survivors",
        )
        for s in after:
            if s.shard in before:
                assert s.owner in survivors and s.fencing_token > before[s.shard]

    bad = cli("shards", "--region", "Not_A_Region", "--api", suite.api_address)
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr
    other = cli("shards", "--region", "elsewhere", "--json", "--api", suite.api_address)
    assert other.returncode == 0 and not any(s["owned"] for s in json.loads(other.stdout))


def test_dev_with_regions_lists_its_processes_and_stops_on_sigint(
    pg_server, migrated_template, tmp_path, monkeypatch
) -> None:
    # gnomon dev makes its own CA and key and points profile "dev" of this config file at them
    monkeypatch.setenv("GNOMON_CONFIG_FILE", str(tmp_path / "config.toml"))
    name = f"dev_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(name, template=migrated_template)
    data = tmp_path / "dev"
    api = f"127.0.0.1:{free_port()}"
    log = open(tmp_path / "dev.log", "wb")
    dev = subprocess.Popen(
        [
            *GNOMON,
            "dev",
            "--data-dir",
            str(data),
            "--api",
            api,
            "--dispatchers",
            "2",
            "--regions",
            "eu,us",
            "--database-url",
            url,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    pids: list[int] = []
    try:
        wait_for(lambda: (data / "status.json").exists() or dev.poll() is not None, 60, "status.json")
        assert dev.poll() is None, (tmp_path / "dev.log").read_text()
        out = cli("dev", "status", "--data-dir", str(data), "--json")
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        assert st["running"] and st["pid"] == dev.pid and st["api"] == api and st["regions"] == ["eu", "us"]
        everything = st["processes"]
        # the web console is one more process of gnomon dev (docs/console.md), not of any region
        consoles = [p for p in everything if p["role"] == "console"]
        assert len(consoles) == 1 and consoles[0]["alive"] and consoles[0]["pid"] > 0
        procs = [p for p in everything if p["role"] != "console"]
        by = collections.Counter((p["region"], p["role"]) for p in procs)
        assert by == {
            (r, role): n
            for r in ("eu", "us")
            for role, n in (("api", 1), ("dispatcher", 2), ("planner", 1), ("reaper", 1))
        }
        assert all(
            p["alive"]
            and p["pid"] > 0
            and p["address"].startswith("127.0.0.1:")
            and p["metrics"].startswith("127.0.0.1:")
            for p in procs
        )
        assert len({p["address"] for p in procs}) == len(procs) == len({p["metrics"] for p in procs})
        pids = [p["pid"] for p in everything]
        eu_api = next(p["address"] for p in procs if p["role"] == "api" and p["region"] == "eu")
        us_api = next(p["address"] for p in procs if p["role"] == "api" and p["region"] == "us")
        assert eu_api == api
        text = cli("dev", "status", "--data-dir", str(data))
        assert text.returncode == 0 and "dispatcher" in text.stdout and " us " in text.stdout

        # each region's dispatchers own that region's shards; any API can list any region
        us_dispatchers = {p["address"] for p in procs if p["role"] == "dispatcher" and p["region"] == "us"}
        with Client(api=us_api) as c:
            us_ids = {d.dispatcher_id for d in c.list_dispatchers() if d.address in us_dispatchers}
        assert len(us_ids) == 2

        def us_shards():
            r = cli("shards", "--region", "us", "--json", "--api", eu_api)
            x = json.loads(r.stdout) if r.returncode == 0 else []
            return x and balanced([SimpleNamespace(**s) for s in x], us_ids) and x

        assert {s["region"] for s in wait_for(us_shards, 30, "us shards owned by the us dispatchers")} == {
            "us"
        }

        dev.send_signal(signal.SIGINT)
        assert dev.wait(60) == 0, (tmp_path / "dev.log").read_text()
        assert not (data / "status.json").exists()
        gone = cli("dev", "status", "--data-dir", str(data), "--json")
        assert gone.returncode == 1
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        pg_server.drop_database(name)
