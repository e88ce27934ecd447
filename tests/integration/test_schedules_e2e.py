"""Recurring schedules end to end through real processes (api, planner x2, dispatcher, reaper,
worker) over the public gRPC contract: occurrences run, bad input is refused with reasons and
nothing stored, and planner crashes/pauses never duplicate or drop an occurrence."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gnomon._proto.gnomon.v1 import schedule_pb2, schedule_service_pb2_grpc
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.sdk.connection import open_channel
from gnomon_test_support import records, running_suite, sql, wait_for

pytestmark = pytest.mark.integration
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory):
    with running_suite(
        pg_server,
        migrated_template,
        tmp_path_factory.mktemp("sched-suite"),
        env={"GNOMON_PLANNER_LOOKAHEAD_S": "2", "GNOMON_PLANNER_IDLE_IN_TRANSACTION_TIMEOUT_MS": "2000"},
    ) as s:
        yield s


@pytest.fixture(scope="module")
def stub(suite):
    ch = open_channel(suite.api_address)
    yield schedule_service_pb2_grpc.ScheduleServiceStub(ch)
    ch.close()


def every_second(queue: str, **kw) -> schedule_pb2.Schedule:
    return schedule_pb2.Schedule(
        cron="* * * * * *",
        overlap_policy=schedule_pb2.OVERLAP_POLICY_ALLOW,
        job_template=schedule_pb2.JobTemplate(queue=queue, payload=b"{}"),
        **kw,
    )


def test_every_second_schedule_runs_on_workers_never_early(suite, stub):
    record = os.path.join(suite.work_dir, "tick.txt")
    worker = suite.start_worker(
        ["tick"],
        "gnomon_test_handlers:record_occurrence",
        env={"GNOMON_TEST_RECORD": record, "PYTHONPATH": TESTS_DIR},
    )
    try:
        s = stub.CreateSchedule(
            pb.CreateScheduleRequest(schedule_id="tick", schedule=every_second("tick"))
        ).schedule
        assert s.name == "namespaces/default/schedules/tick" and s.etag == "1" and s.tzdata_version
        wait_for(lambda: len(records(record)) >= 4, 30, "4 occurrences to run")
        rows = sql(
            suite.database_url,
            "SELECT nominal_time, scheduled_at, dispatched_at FROM jobs "
            "WHERE schedule_id = 'tick' AND dispatched_at IS NOT NULL ORDER BY nominal_time",
        )
        assert len(rows) >= 4
        for nominal, sched_at, disp in rows:
            assert nominal.microsecond == 0 and sched_at >= nominal and disp >= sched_at  # never early
        # the worker's context carries the schedule and the nominal time of each occurrence
        by_job = {
            f"namespaces/default/jobs/{i}": n
            for i, n in sql(
                suite.database_url, "SELECT id, nominal_time FROM jobs WHERE schedule_id = 'tick'"
            )
        }
        for job, schedule, nominal, coalesced in records(record):
            assert schedule == "namespaces/default/schedules/tick" and coalesced == "0"
            assert datetime.fromisoformat(nominal) == by_job[job]
        hist = stub.ListScheduleOccurrences(pb.ListScheduleOccurrencesRequest(parent=s.name, page_size=3))
        assert len(hist.occurrences) == 3 and hist.next_page_token
        assert all(
            o.decision in (schedule_pb2.OCCURRENCE_DECISION_FIRED, schedule_pb2.OCCURRENCE_DECISION_LATE)
            and o.job.startswith("namespaces/default/jobs/")
            for o in hist.occurrences
        )
        nominals = [o.nominal_time.ToDatetime() for o in hist.occurrences]
        assert nominals == sorted(nominals, reverse=True)
    finally:
        stub.DeleteSchedule(pb.DeleteScheduleRequest(name="namespaces/default/schedules/tick"))
        suite.stop_proc(worker)
    with pytest.raises(grpc.RpcError) as e:
        stub.GetSchedule(pb.GetScheduleRequest(name="namespaces/default/schedules/tick"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def _details(err: grpc.RpcError) -> tuple[str, list[str]]:
    st = rpc_status.from_call(err)
    reason, fields = "", []
    for d in st.details:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            reason = info.reason
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            d.Unpack(br)
            fields = [v.field for v in br.field_violations]
    return reason, fields


def _ts(s: str) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromDatetime(datetime.fromisoformat(s).replace(tzinfo=UTC))
    return t


T = schedule_pb2.JobTemplate(queue="bad")


@pytest.mark.parametrize(
    "schedule,reason,field,message",
    [
        (
            schedule_pb2.Schedule(cron="0 0 32 * *", job_template=T),
            "INVALID_CRON",
            "schedule.cron",
            "day-of-month",
        ),
        (schedule_pb2.Schedule(cron="0 0 31 4 *", job_template=T), "RULE_NEVER_FIRES", "schedule.cron", ""),
        (schedule_pb2.Schedule(cron="0 0 30 2 *", job_template=T), "RULE_NEVER_FIRES", "schedule.cron", ""),
        (schedule_pb2.Schedule(cron="0 * * *", job_template=T), "INVALID_CRON", "schedule.cron", ""),
        (
            schedule_pb2.Schedule(cron="0 9 * * *", time_zone="Mars/Olympus", job_template=T),
            "INVALID_TIME_ZONE",
            "schedule.time_zone",
            "Mars/Olympus",
        ),
        (
            schedule_pb2.Schedule(
                rrule="FREQ=FORTNIGHTLY", job_template=T, start_time=_ts("2026-01-01T00:00:00")
            ),
            "INVALID_RRULE",
            "schedule.rrule",
            "",
        ),
        (
            schedule_pb2.Schedule(
                rrule="FREQ=SECONDLY;BYHOUR=9", job_template=T, start_time=_ts("2026-01-01T00:00:00")
            ),
            "RRULE_UNBOUNDED",
            "schedule.rrule",
            "",
        ),
        (
            schedule_pb2.Schedule(
                cron="0 9 * * *",
                job_template=T,
                start_time=_ts("2027-01-01T00:00:00"),
                end_time=_ts("2026-01-01T00:00:00"),
            ),
            "INVALID_TIME_RANGE",
            "schedule.end_time",
            "",
        ),
        (
            schedule_pb2.Schedule(cron="0 9 * * *", job_template=T, max_catchup=5000),
            "INVALID_FIELD",
            "schedule.max_catchup",
            "",
        ),
        (
            schedule_pb2.Schedule(interval=duration_pb2.Duration(seconds=0), job_template=T),
            "INVALID_FIELD",
            "schedule.interval",
            "",
        ),
        (schedule_pb2.Schedule(cron="0 9 * * *"), "INVALID_FIELD", "schedule.job_template.queue", ""),
        # regressions from the adversarial review
        (
            schedule_pb2.Schedule(cron="0 9 * * *", time_zone="localtime", job_template=T),
            "INVALID_TIME_ZONE",
            "schedule.time_zone",
            "tzdata",
        ),
        (
            schedule_pb2.Schedule(cron="0 9 * * *", time_zone="right/UTC", job_template=T),
            "INVALID_TIME_ZONE",
            "schedule.time_zone",
            "",
        ),
        (
            schedule_pb2.Schedule(cron="0 0 * * *", job_template=T, start_time=_ts("9999-12-31T23:59:59")),
            "INVALID_FIELD",
            "schedule.start_time",
            "9000",
        ),
        (
            schedule_pb2.Schedule(rrule="DTSTART:00010101T000000Z\nRRULE:FREQ=DAILY", job_template=T),
            "INVALID_TIME_RANGE",
            "schedule.start_time",
            "",
        ),
        (
            schedule_pb2.Schedule(
                cron="0 0 * * *",
                job_template=T,
                start_time=_ts("2030-01-01T00:00:00"),
                end_time=_ts("2030-01-01T00:00:00"),
            ),
            "INVALID_TIME_RANGE",
            "schedule.end_time",
            "",
        ),
        (
            schedule_pb2.Schedule(cron="0 0 * * *", job_template=T, end_time=_ts("2001-01-01T00:00:00")),
            "RULE_NEVER_FIRES",
            "schedule.cron",
            "",
        ),
        (
            schedule_pb2.Schedule(
                rrule="FREQ=HOURLY;COUNT=100000;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;BYHOUR=0",
                job_template=T,
                start_time=_ts("1971-01-01T00:00:00"),
            ),
            "RULE_NEVER_FIRES",
            "schedule.rrule",
            "",
        ),
    ],
)
def test_bad_schedules_are_refused_with_reason_and_field_and_nothing_stored(
    suite, stub, schedule, reason, field, message
):
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stub.CreateSchedule(pb.CreateScheduleRequest(schedule_id="bad", schedule=schedule), timeout=10)
    assert time.monotonic() - started < 2.0  # bounded, even for impossible dates
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    got_reason, fields = _details(e.value)
    assert got_reason == reason and field in fields
    assert message in e.value.details() and "Traceback" not in e.value.details()
    assert sql(suite.database_url, "SELECT count(*) FROM schedules WHERE schedule_id = 'bad'") == [(0,)]


def test_preview_over_grpc_case10_and_case11(stub):
    def preview(cron, frm, n=3):
        return stub.PreviewSchedule(
            pb.PreviewScheduleRequest(rule=pb.PreviewRule(cron=cron), from_time=_ts(frm), count=n)
        ).fire_times

    [may31] = preview("0 0 31 4,5 *", "2025-01-01T00:00:00", 1)
    assert may31.fire_time.ToJsonString() == "2025-05-31T00:00:00Z"
    [leap] = preview("0 0 29 2 *", "2025-03-01T00:00:00", 1)
    assert leap.fire_time.ToJsonString() == "2028-02-29T00:00:00Z"
    got = preview("0 16 4 * fri", "2026-12-01T00:00:00", 3)
    # Dec 2026: Fri 4th (both), Fri 11th, Fri 18th
    assert [f.fire_time.ToJsonString() for f in got] == [
        "2026-12-04T16:00:00Z",
        "2026-12-11T16:00:00Z",
        "2026-12-18T16:00:00Z",
    ]
    got = preview("0 16 4 * fri", "2027-01-01T00:00:00", 2)  # Jan 2027: Fri 1st, Mon 4th
    assert [f.fire_time.ToJsonString() for f in got] == ["2027-01-01T16:00:00Z", "2027-01-04T16:00:00Z"]
    assert "day-of-month" in got[1].note and "day-of-week" in got[0].note


def _assert_exactly_once_consecutive(url: str, sid: str) -> int:
    rows = [r[0] for r in sql(url, "SELECT nominal_time FROM jobs WHERE schedule_id = %s ORDER BY 1", sid)]
    assert len(rows) == len(set(rows)), "an occurrence was planned twice"
    gaps = [(b - a).total_seconds() for a, b in zip(rows, rows[1:])]
    assert set(gaps) <= {1.0}, f"an occurrence is missing: gaps {sorted(set(gaps))}"
    dup = sql(
        url,
        "SELECT nominal_time FROM schedule_occurrences o JOIN schedules s ON s.uid = o.schedule_uid "
        "WHERE s.schedule_id = %s GROUP BY 1 HAVING count(*) > 1",
        sid,
    )
    assert dup == []
    return len(rows)


def test_planner_sigstop_and_kill9_neither_duplicate_nor_drop_occurrences(suite, stub):
    second = suite.start_service("planner")
    first = next(p for p in suite.procs if p.role == "planner" and p is not second)
    from gnomon.cli.suite import wait_healthy

    wait_healthy(second.address)
    stub.CreateSchedule(pb.CreateScheduleRequest(schedule_id="faults", schedule=every_second("nobody")))

    def planned() -> int:
        return sql(suite.database_url, "SELECT count(*) FROM jobs WHERE schedule_id = 'faults'")[0][0]

    try:
        wait_for(lambda: planned() >= 2, 10, "the planners to plan the schedule")
        os.kill(first.popen.pid, signal.SIGSTOP)  # paused, maybe inside a transaction
        time.sleep(4)  # the fault under test: paused past its idle-in-transaction timeout (2 s)
        os.kill(first.popen.pid, signal.SIGCONT)
        time.sleep(2)  # the fault under test: both planners run side by side for a while
        os.kill(second.popen.pid, signal.SIGKILL)  # the other one dies mid-flight
        second.popen.wait()
        third = suite.start_service("planner")
        wait_healthy(third.address)
        before = planned()
        wait_for(lambda: planned() >= before + 3, 15, "the planners to plan on after the kill")
        n = _assert_exactly_once_consecutive(suite.database_url, "faults")
        assert n >= 10
    finally:
        stub.PauseSchedule(pb.PauseScheduleRequest(name="namespaces/default/schedules/faults"))
    assert first.popen.poll() is None  # the resumed planner carried on


def _api_cpu_s(suite) -> float:
    """User + system CPU seconds the API process has used so far."""
    pid = next(p for p in suite.procs if p.role == "api").popen.pid
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: Rules whose RRULE part can never select a time: each took 1.6 s to minutes of CPU per search.
NEVER_SELECTS = [
    "FREQ=WEEKLY;BYDAY=WE;BYSETPOS=2",
    "FREQ=DAILY;BYHOUR=9;BYSETPOS=2",
    "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2",
    "FREQ=MONTHLY;INTERVAL=12;BYMONTH=3",
    "FREQ=MONTHLY;BYDAY=MO;BYMONTHDAY=29,30,31;BYSETPOS=2",
    "FREQ=DAILY;INTERVAL=146097;BYMONTH=3",
]


@pytest.mark.parametrize("rdate", ["", "\nRDATE:20300101T000000Z"], ids=["alone", "with-rdate"])
@pytest.mark.parametrize("rule", NEVER_SELECTS)
def test_rules_that_never_select_are_refused_at_once_even_beside_an_rdate(suite, stub, rule, rdate):
    text = f"DTSTART:20200101T090000\nRRULE:{rule}{rdate}"
    for call in (
        lambda: stub.CreateSchedule(
            pb.CreateScheduleRequest(
                schedule_id="never", schedule=schedule_pb2.Schedule(rrule=text, job_template=T)
            ),
            timeout=10,
        ),
        lambda: stub.PreviewSchedule(
            pb.PreviewScheduleRequest(rule=pb.PreviewRule(rrule=text), count=3), timeout=10
        ),
    ):
        cpu0 = _api_cpu_s(suite)
        with pytest.raises(grpc.RpcError) as e:
            call()
        spent = _api_cpu_s(suite) - cpu0
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        reason, fields = _details(e.value)
        assert reason == "RULE_NEVER_FIRES" and any(f.endswith("rrule") for f in fields), (reason, fields)
        assert spent < 0.1, f"the refusal of {rule!r} cost {spent:.3f} s of API CPU"
    assert sql(suite.database_url, "SELECT count(*) FROM schedules WHERE schedule_id = 'never'") == [(0,)]
