"""The policy of PreviewSchedule: previewing an unsaved rule reads nothing stored, so any
authenticated caller may; previewing a saved schedule needs schedules.read in its namespace."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon.common.auth.policy import POLICY
from gnomon.common.auth.principals import Grant, Principal, PrincipalKind, Role
from gnomon.common.errors import PermissionDenied
from gnomon.common.rpc.auth import authorize

RULE = POLICY["/gnomon.v1.ScheduleService/PreviewSchedule"]
ACME_READER = Principal("r", PrincipalKind.API_KEY, (Grant("acme", Role.READER),))


def test_an_unsaved_rule_needs_no_namespace_grant() -> None:
    nobody = Principal("n", PrincipalKind.API_KEY, ())
    assert authorize(nobody, RULE, spb.PreviewScheduleRequest(rule=spb.PreviewRule(cron="0 2 * * *"))) is None


def test_a_saved_schedule_needs_schedules_read_in_its_namespace() -> None:
    mine = spb.PreviewScheduleRequest(name="namespaces/acme/schedules/nightly")
    assert authorize(ACME_READER, RULE, mine) == "acme"
    with pytest.raises(PermissionDenied):
        authorize(ACME_READER, RULE, spb.PreviewScheduleRequest(name="namespaces/other/schedules/nightly"))
