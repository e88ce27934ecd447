"""Resource names (gnomon.common.names): format and parse round trips, malformed names refused with
INVALID_ARGUMENT on the field that carried them."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from gnomon.common import names
from gnomon.common.errors import InvalidArgument

JOB = uuid.UUID("0b7a1c52-3a57-4a2e-9a51-0d1d0f8d6c1e")


def bad(fn, name: str, field: str = "name") -> None:
    with pytest.raises(InvalidArgument) as e:
        fn(name, field)
    assert [v.field for v in e.value.violations] == [field]


def test_format_and_parse_round_trip():
    assert names.namespace_name("team-a") == "namespaces/team-a"
    assert names.parse_parent(names.namespace_name("team-a")) == "team-a"
    assert names.job_name("ns", JOB) == f"namespaces/ns/jobs/{JOB}"
    assert names.parse_job_name(names.job_name("ns", JOB)) == ("ns", JOB)
    assert names.parse_job_name(names.job_name("ns", str(JOB).upper())) == ("ns", JOB)
    assert names.attempt_name("ns", JOB, 2) == f"namespaces/ns/jobs/{JOB}/attempts/2"
    assert names.schedule_name("ns", "nightly") == "namespaces/ns/schedules/nightly"
    assert names.parse_schedule_name(names.schedule_name("ns", "nightly")) == ("ns", "nightly")
    assert names.parse_schedule_name(names.schedule_name("ns", str(JOB))) == ("ns", str(JOB))
    nominal = datetime(2026, 12, 1, 11, 0, tzinfo=timezone(timedelta(hours=1)))
    assert names.occurrence_name("namespaces/ns/schedules/s", nominal) == (
        "namespaces/ns/schedules/s/occurrences/2026-12-01T10:00:00.000000Z"
    )
    assert names.queue_name("ns", "emails.v2") == "namespaces/ns/queues/emails.v2"
    assert names.parse_queue_name(names.queue_name("ns", "emails.v2")) == ("ns", "emails.v2")
    assert names.audit_entry_name("ns", JOB) == f"namespaces/ns/auditEntries/{JOB}"


def test_empty_parent_is_the_default_namespace():
    assert names.parse_parent("") == names.DEFAULT_NAMESPACE == "default"


@pytest.mark.parametrize(
    "parent",
    [
        "namespaces",
        "namespaces/",
        "namespaces/-a",
        "namespaces/a-",
        "namespaces/A",
        "ns/a",
        "namespaces/a/b",
        "namespaces/" + "a" * 64,
    ],
)
def test_malformed_parents(parent):
    bad(names.parse_parent, parent, "parent")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "jobs/x",
        f"namespaces/ns/jobs/{JOB}/x",
        "namespaces/ns/jobs/not-a-uuid",
        f"namespaces/NS/jobs/{JOB}",
        f"namespaces/ns/schedules/{JOB}",
    ],
)
def test_malformed_job_names(name):
    bad(names.parse_job_name, name, "parent")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "namespaces/ns/schedules/",
        "namespaces/ns/schedules/Nightly",
        "namespaces/ns/schedules/-x",
        "namespaces/ns/jobs/x",
        "namespaces/ns/schedules/" + "a" * 64,
    ],
)
def test_malformed_schedule_names(name):
    bad(names.parse_schedule_name, name, "schedule.name")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "namespaces/ns/queues/",
        "namespaces/ns/queues/.x",
        "namespaces/ns/queues/Q",
        "namespaces/ns/queue/q",
        "namespaces/ns/queues/" + "a" * 65,
    ],
)
def test_malformed_queue_names(name):
    bad(names.parse_queue_name, name)


def test_namespace_of():
    assert names.namespace_of("", parent=True) == "default"
    assert names.namespace_of("") is None
    assert names.namespace_of("namespaces/a") == "a"
    assert names.namespace_of(names.job_name("a", JOB)) == "a"
    assert names.namespace_of(names.schedule_name("b", "s")) == "b"
    for malformed in ("namespaces/A", "namespaces/a/jobs", "x/a", "namespaces/a/b/c/d"):
        assert names.namespace_of(malformed) is None
