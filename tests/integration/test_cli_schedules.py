"""``gnomon schedule ...`` as a subprocess against the real suite (api, planner, dispatcher, reaper as
processes): preview of unsaved rules across a DST gap, rule errors, and a create/get/pause/resume/
trigger/history/delete round trip; the async SDK client. One suite for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from gnomon.sdk import AsyncClient, GnomonError
from gnomon_test_support import running_suite


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("cli_sched")) as s:
        yield s


def gnomon(suite, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GNOMON_API=suite.api_address, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "gnomon.cli.main", "schedule", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(suite, *args: str) -> str:
    r = gnomon(suite, *args)
    assert r.returncode == 0, f"{args}: rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}"
    return r.stdout


def preview(suite, gap: str) -> list[dict]:
    out = ok(
        suite,
        "preview",
        "--cron",
        "0 2 * * *",
        "--tz",
        "America/New_York",
        "--dst-gap",
        gap,
        "--from",
        "2013-03-09T12:00:00Z",
        "--count",
        "2",
        "--json",
    )
    return json.loads(out)


def test_preview_spring_forward_gap_skip(suite):
    items = preview(suite, "skip")
    fired = [i for i in items if not i["skipped"]]
    assert fired[0]["fire_time"] == "2013-03-11T06:00:00Z"
    assert fired[0]["local_time"] == "2013-03-11T02:00:00-04:00"
    assert len(fired) == 2
    before = items[: items.index(fired[0])]
    assert all(i["skipped"] for i in before) and all("note" in i for i in items)
    assert [i["fire_time"][:10] for i in before] in ([], ["2013-03-10"])


def test_preview_spring_forward_gap_shift_forward(suite):
    items = preview(suite, "shift_forward")
    assert not items[0]["skipped"]
    assert items[0]["fire_time"] == "2013-03-10T07:00:00Z"
    assert items[0]["local_time"] == "2013-03-10T03:00:00-04:00"
    assert items[0]["note"]


def test_preview_of_a_rule_that_never_fires_fails(suite):
    r = gnomon(
        suite,
        "preview",
        "--cron",
        "0 0 31 4 *",
        "--tz",
        "UTC",
        "--from",
        "2025-01-01T00:00:00Z",
        "--count",
        "1",
    )
    assert r.returncode != 0
    assert "RULE_NEVER_FIRES" in r.stderr or "never" in r.stderr


def test_preview_of_a_bad_day_of_month_fails_naming_the_field(suite):
    r = gnomon(suite, "preview", "--cron", "0 0 32 * *", "--tz", "UTC", "--count", "1")
    assert r.returncode != 0
    assert "day-of-month" in r.stderr or "day of month" in r.stderr, r.stderr


def test_preview_of_an_unknown_zone_fails_naming_time_zone(suite):
    r = gnomon(suite, "preview", "--cron", "0 2 * * *", "--tz", "Mars/Olympus", "--count", "1")
    assert r.returncode != 0
    assert "time_zone" in r.stderr, r.stderr


def test_schedule_round_trip(suite):
    sid = f"cli-{uuid.uuid4().hex[:8]}"
    name = ok(
        suite,
        "create",
        "--id",
        sid,
        "--queue",
        "cli-sched",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--misfire",
        "coalesce",
        "--overlap",
        "allow",
        "--payload",
        '{"k":1}',
        "--idempotent",
    ).strip()
    assert name == f"namespaces/default/schedules/{sid}"

    got = json.loads(ok(suite, "get", sid, "--json"))
    assert got["name"] == name and got["cron"] == "0 3 * * *" and got["time_zone"] == "Europe/Berlin"
    assert got["misfire_policy"] == "COALESCE" and got["overlap_policy"] == "ALLOW" and not got["paused"]
    assert got["job_template"]["queue"] == "cli-sched" and got["job_template"]["idempotent"]
    assert got["next_fire_time"].endswith("Z")

    listed = [json.loads(line) for line in ok(suite, "list", "--json").splitlines()]
    assert name in [s["name"] for s in listed]

    assert "paused" in ok(suite, "pause", sid)
    assert json.loads(ok(suite, "get", sid, "--json"))["paused"] is True
    assert "resumed" in ok(suite, "resume", name)
    assert json.loads(ok(suite, "get", sid, "--json"))["paused"] is False

    out = ok(suite, "update", sid, "--cron", "30 4 * * *", "--json")
    upd = json.loads(out)
    assert (
        upd["cron"] == "30 4 * * *"
        and upd["time_zone"] == "Europe/Berlin"
        and upd["version"] > got["version"]
    )

    trig = json.loads(ok(suite, "trigger", sid, "--json"))
    assert trig["decision"] == "FIRED" and trig["source"] == "TRIGGER"
    assert trig["job"].startswith("namespaces/default/jobs/")

    hist = [json.loads(line) for line in ok(suite, "history", sid, "--json").splitlines()]
    triggered = [h for h in hist if h["source"] == "TRIGGER"]
    assert len(triggered) == 1 and triggered[0]["job"] == trig["job"]
    assert triggered[0]["local_time"].endswith(("+01:00", "+02:00"))
    table = ok(suite, "history", sid)
    assert "TRIGGER" in table and trig["job"].rsplit("/", 1)[1] in table
    assert ok(suite, "history", sid, "--decision", "skipped_overlap").strip() == "no occurrences yet"

    assert "deleted" in ok(suite, "delete", sid)
    r = gnomon(suite, "get", sid)
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr


def test_create_with_bad_rule_fails_and_usage_errors_exit_2(suite):
    r = gnomon(suite, "create", "--queue", "q", "--cron", "not a cron")
    assert r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr and "cron" in r.stderr
    r = gnomon(suite, "create", "--queue", "q", "--cron", "* * * * *", "--rrule", "FREQ=DAILY")
    assert r.returncode == 2
    r = gnomon(suite, "create", "--queue", "q", "--cron", "* * * * *", "--overlap", "sometimes")
    assert r.returncode == 2 and "--overlap" in r.stderr


async def test_async_client_schedule_methods(suite):
    async with AsyncClient(api=suite.api_address) as c:
        fts = await c.preview_schedule(
            cron="0 2 * * *",
            time_zone="America/New_York",
            dst_gap="SHIFT_FORWARD",
            from_time=datetime(2013, 3, 9, 12, tzinfo=UTC),
            count=1,
        )
        assert fts[0].local_time == "2013-03-10T03:00:00-04:00"
        s = await c.create_schedule(
            "async-q", every=3600, start_time=datetime(2030, 1, 1, tzinfo=UTC), paused=True
        )
        assert s.paused and s.interval == timedelta(hours=1)
        assert s.name in [x.name async for x in c.list_schedules(paused=True)]
        s2 = await c.update_schedule(s.name, etag=s.etag, max_attempts=7, overlap_policy="buffer_all")
        assert s2.job_template.max_attempts == 7 and s2.job_template.queue == "async-q"
        assert s2.overlap_policy == "BUFFER_ALL"
        with pytest.raises(GnomonError) as e:
            await c.update_schedule(s.name, etag=s.etag, jitter=1)
        assert e.value.reason == "STALE_VERSION"
        assert await c.delete_schedule(s.name) == 0
