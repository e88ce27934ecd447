"""SimulateOutage against a real suite: the planner process is really killed, the outage lasts a few
seconds, the planner is restarted, and the prediction made for exactly that window (the planner's
last step before the kill: the schedules' ``planned_through``; its first step after the restart: the
decide time of the recovery records) equals the decision records the planner wrote. The simulation
writes nothing (row counts and schedule versions unchanged), pages over a namespace, and refuses bad
windows with field violations; the CLI prints the same prediction."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.sdk import Client, GnomonError
from gnomon_test_support import running_suite, sql, wait_for

pytestmark = pytest.mark.integration
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTAGE_S = 6.0
DOCS = os.path.join(os.path.dirname(TESTS_DIR), "docs", "schedules.md")
TABLES = ("jobs", "schedule_occurrences", "schedules", "catchup_budget", "audit_log")


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    # a small catch-up budget (2 runs at once, then 2/s) so the recovery's catch-up runs are spread
    env = {"GNOMON_PLANNER_CATCHUP_RATE": "2", "GNOMON_PLANNER_CATCHUP_BURST": "2"}
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("outage-suite"), env=env) as s:
        yield s


def counts(url: str) -> dict:
    out = {t: sql(url, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES}
    out["versions"] = sql(url, "SELECT coalesce(sum(version), 0), max(updated_at) FROM schedules")[0]
    return out


def actual(c, name, t1, t2):
    """The records the planner wrote for nominal times in (t1, t2], summarised as a prediction is:
    runs one by one, skips as ranges of the same decision and note."""
    recs = sorted(
        (o for o in c.list_schedule_occurrences(name) if t1 < o.nominal_time <= t2),
        key=lambda o: o.nominal_time,
    )
    runs, skipped = [], []
    for o in recs:
        if o.decision.startswith("SKIPPED"):
            if skipped and skipped[-1][0] == o.decision and skipped[-1][1] == o.note:
                skipped[-1][2] += 1
                skipped[-1][4] = o.nominal_time
            else:
                skipped.append([o.decision, o.note, 1, o.nominal_time, o.nominal_time])
        else:
            runs.append(run_key(o))
    return runs, [tuple(s) for s in skipped]


def run_key(o) -> tuple:
    return (
        o.decision,
        o.nominal_time,
        o.local_time,
        o.note,
        o.schedule_time,
        o.decide_time,
        o.missed_count,
        o.missed_first_time,
        o.missed_last_time,
    )


def test_prediction_equals_what_the_planner_did_after_a_real_outage(suite):
    record = os.path.join(suite.work_dir, "outage.txt")
    worker = suite.start_worker(
        ["outage"],
        "gnomon_test_handlers:record_occurrence",
        env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR},
    )
    planner = next(p for p in suite.procs if p.role == "planner")
    with Client(api=suite.api_address) as c:
        common = dict(cron="* * * * * *", misfire_grace=1)
        c.create_schedule("outage", schedule_id="coalesce", misfire_policy="COALESCE", **common)
        c.create_schedule(
            "outage",
            schedule_id="catchup",
            misfire_policy="RUN_ALL",
            max_catchup=3,
            overlap_policy="CANCEL_OTHER",
            **common,
        )
        names = ["namespaces/default/schedules/coalesce", "namespaces/default/schedules/catchup"]
        wait_for(
            lambda: all(len(list(c.list_schedule_occurrences(n))) >= 2 for n in names),
            15,
            "both schedules to fire twice",
        )
        suite.stop_proc(planner, signal.SIGKILL)  # the outage starts: no planner at all
        rows = [c.get_schedule(n) for n in names]
        t1 = rows[0].planned_through_time
        assert t1 is not None and rows[1].planned_through_time == t1  # planned by the same last step

        # while it is down: a simulation writes nothing (planner stopped, so nothing else plans)
        before = counts(suite.database_url)
        preds, token = c.simulate_outage(t1, t1 + timedelta(hours=2), page_size=1)
        assert [p.schedule for p in preds] == [names[1]] and token  # id order: catchup, coalesce
        more, token = c.simulate_outage(t1, t1 + timedelta(hours=2), page_size=1, page_token=token)
        assert [p.schedule for p in more] == [names[0]] and token == ""
        assert more[0].runs[0].decision == "COALESCED" and more[0].runs[0].missed_count == 7199
        with pytest.raises(GnomonError) as e:
            c.simulate_outage(t1, t1 - timedelta(seconds=1), "coalesce")
        assert e.value.code.name == "INVALID_ARGUMENT"
        assert [f for f, _ in e.value.field_violations] == ["outage_end_time"]
        with pytest.raises(GnomonError) as e:
            c.simulate_outage(t1, t1 + timedelta(days=2), "coalesce")  # 172800 nominal times
        assert "more than 100000 nominal times" in e.value.field_violations[0][1]
        assert counts(suite.database_url) == before

        time.sleep(max(0.0, OUTAGE_S - (time.time() - t1.timestamp())))  # the outage under test
        restarted = suite.start_service("planner")
        wait_healthy(restarted.address, ca_file=suite.credentials.ca_file if suite.credentials else None)
        recovered = wait_for(
            lambda: [
                o for n in names for o in c.list_schedule_occurrences(n, page_size=10) if o.nominal_time > t1
            ],
            15,
            "the restarted planner to plan the backlog",
        )
        t2 = min(o.decide_time for o in recovered)
        assert t2 - t1 >= timedelta(seconds=OUTAGE_S - 0.5)

        # the prediction for exactly that window, both schedules in one request (they share the budget)
        preds, token = c.simulate_outage(t1, t2)
        assert token == "" and [p.schedule for p in preds] == names[::-1]
        by_name = {p.schedule: p for p in preds}
        for n in names:
            p = by_name[n]
            runs, skipped = actual(c, n, t1, t2)
            assert [run_key(o) for o in p.runs] == runs, n
            assert [
                (s.decision, s.note, s.count, s.first_nominal_time, s.last_nominal_time) for s in p.skipped
            ] == skipped, n
            assert p.missed_count == len(runs) + sum(s[2] for s in skipped) >= OUTAGE_S - 1
            assert p.catchup_finish_time == max(r[4] for r in runs)
        co, cu = by_name[names[0]], by_name[names[1]]
        # COALESCE: one run for every missed time; the times within the grace are skipped (overlap SKIP)
        assert co.runs[0].decision == "COALESCED" and co.runs[0].missed_first_time == co.missed_first_time
        # RUN_ALL 3 + COALESCE 1 catch-up runs under a budget of 2 at once, then 2/s: spread over 1 s
        edge = t2 - timedelta(seconds=1)  # missed: before now - grace
        slots = sorted(r.schedule_time for r in co.runs + cu.runs if r.nominal_time < edge)
        assert len(slots) == 4
        assert slots[:2] == [t2, t2] and slots[-1] == t2 + timedelta(seconds=1)

        # the CLI prints the same prediction
        out = subprocess.run(
            [sys.executable, "-m", "gnomon.cli.main", "schedule", "simulate-outage", "--api", suite.api_address,
             "--from", t1.isoformat(), "--to", t2.isoformat(), "coalesce", "--json"],
            env=dict(os.environ, **suite.client_env()),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )  # fmt: skip
        [d] = json.loads(out.stdout)
        assert (
            d["missed_count"] == co.missed_count and d["runs"][0]["missed_count"] == co.runs[0].missed_count
        )
        table = subprocess.run(
            [sys.executable, "-m", "gnomon.cli.main", "schedule", "simulate-outage", "--api", suite.api_address,
             "--from", t1.isoformat(), "--to", t2.isoformat()],
            env=dict(os.environ, **suite.client_env()),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout  # fmt: skip
        assert "COALESCED" in table and "catch-up finishes" in table and names[1] in table
    suite.stop_proc(worker)


def test_the_docs_outage_example_prints_what_it_shows(suite):
    """docs/schedules.md "What happens during an outage": its commands, run as written, print its output."""
    # an API with the default catch-up budget (this suite's planner has a small one), as a user has
    defaults = {"GNOMON_PLANNER_CATCHUP_RATE": "20", "GNOMON_PLANNER_CATCHUP_BURST": "20"}
    api = suite.start_service("api", env=defaults)
    wait_healthy(api.address, ca_file=suite.credentials.ca_file if suite.credentials else None)
    text = Path(DOCS).read_text().split("## What happens during an outage", 1)[1]
    commands, shown = re.search(r"```bash\n(.*?)```\n\n```text\n(.*?)```", text, re.S).groups()
    out = ""
    for line in commands.strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "gnomon"
        out = subprocess.run(
            [sys.executable, "-m", "gnomon.cli.main", *argv[1:], "--api", api.address],
            env=dict(os.environ, **suite.client_env()),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    suite.stop_proc(api)
    assert out == shown, out


def test_bad_requests_are_refused_with_field_violations(suite):
    from google.protobuf.timestamp_pb2 import Timestamp
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
    from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc
    from gnomon.sdk.connection import open_channel

    ch = open_channel(suite.api_address)
    stub = schedule_service_pb2_grpc.ScheduleServiceStub(ch)
    start, end = Timestamp(seconds=1_900_000_000), Timestamp(seconds=1_900_003_600)

    def fields(**kw) -> list[str]:
        with pytest.raises(grpc.RpcError) as e:
            stub.SimulateOutage(pb.SimulateOutageRequest(**kw))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        bad = error_details_pb2.BadRequest()
        next(d for d in rpc_status.from_call(e.value).details if d.Unpack(bad))
        return [v.field for v in bad.field_violations]

    try:
        assert fields() == ["outage_start_time", "outage_end_time"]
        both = dict(name="namespaces/default/schedules/a", parent="namespaces/default")
        assert fields(outage_start_time=start, outage_end_time=end, **both) == ["parent"]
        assert fields(outage_start_time=start, outage_end_time=end, assume_active=-1) == ["assume_active"]
        assert fields(outage_start_time=start, outage_end_time=end, page_size=101) == ["page_size"]
        assert fields(outage_start_time=start, outage_end_time=end, max_runs=1001) == ["max_runs"]
        assert fields(outage_start_time=end, outage_end_time=start) == ["outage_end_time"]
        assert fields(outage_start_time=start, outage_end_time=end, page_token="nope") == ["page_token"]
        with pytest.raises(grpc.RpcError) as e:
            stub.SimulateOutage(
                pb.SimulateOutageRequest(
                    name="namespaces/default/schedules/nope", outage_start_time=start, outage_end_time=end
                )
            )
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        ch.close()
