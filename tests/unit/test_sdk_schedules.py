"""Pure request building / conversion of the SDK's schedule methods (no server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf import timestamp_pb2

from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as pb
from gnomon.cli.render import fire_time_dict, occurrence_dict
from gnomon.sdk import convert
from gnomon.sdk import schedule_requests as c

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_enum_names_map_case_insensitively_and_reject_unknown():
    assert c.misfire_value("coalesce") == schedule_pb2.MISFIRE_POLICY_COALESCE
    assert c.misfire_value("MISFIRE_POLICY_RUN_ALL") == schedule_pb2.MISFIRE_POLICY_RUN_ALL
    assert c.overlap_value("buffer-one") == schedule_pb2.OVERLAP_POLICY_BUFFER_ONE
    assert c.overlap_value(None) == 0 and c.overlap_value(5) == schedule_pb2.OVERLAP_POLICY_CANCEL_OTHER
    assert c.dst_gap_value("skip") == schedule_pb2.DST_GAP_POLICY_SKIP
    assert c.dst_fold_value("BOTH") == schedule_pb2.DST_FOLD_POLICY_BOTH
    assert c.decision_value("skipped_overlap") == schedule_pb2.OCCURRENCE_DECISION_SKIPPED_OVERLAP
    with pytest.raises(ValueError, match="overlap policy"):
        c.overlap_value("sometimes")
    with pytest.raises(ValueError):
        c.misfire_value(99)


def test_schedule_name_accepts_id_or_full_name():
    assert c.schedule_name("nightly", "acme") == "namespaces/acme/schedules/nightly"
    assert c.schedule_name("namespaces/x/schedules/y", "acme") == "namespaces/x/schedules/y"
    for bad in ("", "a/b", "namespaces/x/jobs/y"):
        with pytest.raises(ValueError):
            c.schedule_name(bad, "acme")


def test_create_request_sets_rule_policies_and_template():
    req = c.create_schedule_request(
        "acme",
        "emails",
        every=90.0,
        start_time=T0,
        schedule_id="s1",
        payload={"a": 1},
        misfire_policy="COALESCE",
        overlap_policy="skip",
        jitter=timedelta(seconds=5),
        max_attempts=4,
        idempotent=True,
    )
    s = req.schedule
    assert req.parent == "namespaces/acme" and req.schedule_id == "s1"
    assert s.WhichOneof("rule") == "interval" and s.interval.seconds == 90
    assert s.misfire_policy == schedule_pb2.MISFIRE_POLICY_COALESCE
    assert s.overlap_policy == schedule_pb2.OVERLAP_POLICY_SKIP
    assert (
        s.jitter.seconds == 5 and s.start_time.seconds == int(T0.timestamp()) and not s.HasField("end_time")
    )
    assert s.job_template.queue == "emails" and s.job_template.payload == b'{"a":1}'
    assert s.job_template.max_attempts == 4 and s.job_template.idempotent
    assert s.time_zone == "UTC" and not s.HasField("misfire_grace")


@pytest.mark.parametrize("kwargs", [{}, {"cron": "* * * * *", "rrule": "FREQ=DAILY"}])
def test_create_request_needs_exactly_one_rule(kwargs):
    with pytest.raises(ValueError):
        c.create_schedule_request("default", "q", **kwargs)


def test_update_request_masks_only_given_fields():
    req = c.update_schedule_request(
        "s1", "default", "3", cron="0 1 * * *", overlap_policy="allow", end_time=None
    )
    assert req.schedule.name == "namespaces/default/schedules/s1" and req.schedule.etag == "3"
    assert list(req.update_mask.paths) == ["cron", "overlap_policy", "end_time"]
    assert req.schedule.cron == "0 1 * * *" and not req.schedule.HasField("end_time")
    assert list(c.update_schedule_request("s1", "default", every=60).update_mask.paths) == ["interval"]


def test_update_request_template_fields_keep_the_rest_of_the_current_template():
    cur = schedule_pb2.Schedule(
        job_template=schedule_pb2.JobTemplate(queue="q", payload=b"old", idempotent=True)
    )
    req = c.update_schedule_request("s1", "default", None, cur, payload="new", time_zone="Europe/Paris")
    assert list(req.update_mask.paths) == ["time_zone", "job_template"]
    assert req.schedule.job_template.queue == "q" and req.schedule.job_template.payload == b"new"
    assert req.schedule.job_template.idempotent
    with pytest.raises(ValueError):
        c.update_schedule_request("s1", "default")
    with pytest.raises(TypeError):
        c.update_schedule_request("s1", "default", colour="red")


def test_preview_request_of_rule_or_saved_schedule():
    req = c.preview_schedule_request(
        "default", cron="0 2 * * *", time_zone="America/New_York", dst_gap="skip", from_time=T0, count=2
    )
    assert req.rule.cron == "0 2 * * *" and req.rule.time_zone == "America/New_York"
    assert req.rule.dst_gap == schedule_pb2.DST_GAP_POLICY_SKIP and req.count == 2
    assert req.from_time.seconds == int(T0.timestamp()) and not req.name
    saved = c.preview_schedule_request("default", name="s1")
    assert saved.name == "namespaces/default/schedules/s1" and not saved.HasField("rule")
    with pytest.raises(ValueError):
        c.preview_schedule_request("default", name="s1", cron="* * * * *")


def test_list_and_occurrence_requests():
    assert c.list_schedules_request("default", paused=True).paused == pb.PAUSED_FILTER_PAUSED
    assert c.list_schedules_request("default", paused=False).paused == pb.PAUSED_FILTER_ACTIVE
    req = c.list_occurrences_request("s1", "default", "fired", page_size=5)
    assert (
        req.parent == "namespaces/default/schedules/s1"
        and req.decision == schedule_pb2.OCCURRENCE_DECISION_FIRED
    )


def test_fire_time_and_occurrence_dicts():
    ft = schedule_pb2.PreviewFireTime(
        fire_time=timestamp_pb2.Timestamp(seconds=1363000000),
        local_time="2013-03-11T07:06:40-04:00",
        note="n",
        skipped=False,
    )
    assert fire_time_dict(convert.fire_time_from_proto(ft)) == {
        "fire_time": "2013-03-11T11:06:40Z",
        "local_time": "2013-03-11T07:06:40-04:00",
        "note": "n",
        "skipped": False,
    }
    o = schedule_pb2.ScheduleOccurrence(
        decision=schedule_pb2.OCCURRENCE_DECISION_FIRED,
        source=schedule_pb2.OCCURRENCE_SOURCE_TRIGGER,
        job="namespaces/d/jobs/x",
    )
    d = occurrence_dict(convert.occurrence_from_proto(o))
    assert d["decision"] == "FIRED" and d["source"] == "TRIGGER" and d["job"] == "namespaces/d/jobs/x"
    assert d["nominal_time"] is None


def test_simulate_outage_request_names_a_schedule_or_a_namespace():
    t1 = T0 + timedelta(hours=2)
    one = c.simulate_outage_request(T0, t1, name="nightly", namespace="shop", assume_active=1, max_runs=5)
    assert (one.name, one.parent) == ("namespaces/shop/schedules/nightly", "")
    assert one.outage_start_time.ToDatetime(UTC) == T0 and one.outage_end_time.ToDatetime(UTC) == t1
    assert (one.assume_active, one.max_runs) == (1, 5)
    every = c.simulate_outage_request(T0, t1, name=None, namespace="shop", page_size=3, page_token="x")
    assert (every.name, every.parent, every.page_size, every.page_token) == ("", "namespaces/shop", 3, "x")
    with pytest.raises(ValueError):
        c.simulate_outage_request(datetime(2025, 1, 1), t1, name=None, namespace="shop")  # naive
    with pytest.raises(ValueError):
        c.simulate_outage_request(T0, t1, name="a/b", namespace="shop")


def test_prediction_from_proto_is_a_typed_model():
    def ts(dt: datetime) -> timestamp_pb2.Timestamp:
        t = timestamp_pb2.Timestamp()
        t.FromDatetime(dt)
        return t

    msg = pb.OutagePrediction(
        schedule="namespaces/default/schedules/s",
        misfire_policy=schedule_pb2.MISFIRE_POLICY_COALESCE,
        overlap_policy=schedule_pb2.OVERLAP_POLICY_SKIP,
        missed_count=3,
        missed_first_time=ts(T0),
        missed_last_time=ts(T0 + timedelta(minutes=2)),
        runs=[
            schedule_pb2.ScheduleOccurrence(
                nominal_time=ts(T0 + timedelta(minutes=2)),
                decision=schedule_pb2.OCCURRENCE_DECISION_COALESCED,
                schedule_time=ts(T0 + timedelta(hours=1)),
                missed_count=3,
            )
        ],
        run_count=1,
        skipped=[
            pb.SkippedOccurrenceRange(
                decision=schedule_pb2.OCCURRENCE_DECISION_SKIPPED_MISFIRE,
                note="coalesced",
                count=2,
                first_nominal_time=ts(T0),
                last_nominal_time=ts(T0 + timedelta(minutes=1)),
            )
        ],
        skipped_count=2,
        catchup_finish_time=ts(T0 + timedelta(hours=1)),
        assumptions=["a"],
    )
    p = convert.prediction_from_proto(msg)
    assert (p.misfire_policy, p.overlap_policy, p.missed_count, p.run_count) == ("COALESCE", "SKIP", 3, 1)
    assert p.runs[0].decision == "COALESCED" and p.runs[0].job is None and p.runs[0].missed_count == 3
    assert p.skipped[0].decision == "SKIPPED_MISFIRE" and p.skipped[0].first_nominal_time == T0
    assert p.catchup_finish_time == T0 + timedelta(hours=1) and p.assumptions == ("a",)
    assert (p.skipped_count, p.paused) == (2, False)
