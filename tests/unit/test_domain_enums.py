"""The domain enums carry exactly the text the database and the wire use: each is compared with the
contract's enum (``gnomon.v1``, without its prefix and UNSPECIFIED) and with the error catalogue."""

from __future__ import annotations

import enum

import pytest
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from gnomon._proto.gnomon.v1 import (
    failure_class_pb2,
    job_pb2,
    job_service_pb2,
    queue_service_pb2,
    schedule_pb2,
)
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.policies import (
    BreakerState,
    DstFold,
    DstGap,
    MisfirePolicy,
    OccurrenceDecision,
    OccurrenceSource,
    OverlapPolicy,
)
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import TERMINAL, TRANSITIONS, AttemptState, CancelOutcome, JobState
from gnomon.common.errors import REASONS
from gnomon.common.failure_wire import failure_class_filter, failure_class_from_wire, failure_class_to_wire


def _names(wire: EnumTypeWrapper, prefix: str) -> list[str]:
    return [n.removeprefix(prefix) for n in wire.keys() if not n.endswith("_UNSPECIFIED")]


@pytest.mark.parametrize(
    ("domain", "wire", "prefix"),
    [
        (JobState, job_pb2.JobState, "JOB_STATE_"),
        (AttemptState, job_pb2.AttemptState, "ATTEMPT_STATE_"),
        (FailureClass, failure_class_pb2.FailureClass, "FAILURE_CLASS_"),
        (MisfirePolicy, schedule_pb2.MisfirePolicy, "MISFIRE_POLICY_"),
        (OverlapPolicy, schedule_pb2.OverlapPolicy, "OVERLAP_POLICY_"),
        (DstGap, schedule_pb2.DstGapPolicy, "DST_GAP_POLICY_"),
        (DstFold, schedule_pb2.DstFoldPolicy, "DST_FOLD_POLICY_"),
        (OccurrenceDecision, schedule_pb2.OccurrenceDecision, "OCCURRENCE_DECISION_"),
        (OccurrenceSource, schedule_pb2.OccurrenceSource, "OCCURRENCE_SOURCE_"),
        (BreakerState, queue_service_pb2.BreakerState, "BREAKER_STATE_"),
        (CancelOutcome, job_service_pb2.CancelOutcome, "CANCEL_OUTCOME_"),
    ],
)
def test_domain_enum_matches_the_contract(
    domain: type[enum.StrEnum], wire: EnumTypeWrapper, prefix: str
) -> None:
    assert sorted(m.value for m in domain) == sorted(_names(wire, prefix))
    assert all(m.value == m.name for m in domain)


def test_error_reasons_are_the_catalogue() -> None:
    assert set(REASONS) == set(ErrorReason)
    assert all(r.value == r.name for r in ErrorReason)


def test_reserved_states_are_terminal_unreachable_and_documented() -> None:
    for reserved in (JobState.FAILED, JobState.SKIPPED):
        assert reserved in TERMINAL
        assert all(reserved not in dsts for dsts in TRANSITIONS.values())
        assert "never written" in (JobState.__doc__ or "")


def test_short_state_names_are_the_enum_members() -> None:
    assert JobState.QUEUED is JobState.QUEUED and AttemptState.LOST is AttemptState.LOST
    assert JobState.SCHEDULED == "SCHEDULED"


def test_failure_class_text_and_wire_map_one_to_one():
    for c in FailureClass:
        wire = failure_class_to_wire(c.value)
        assert failure_class_pb2.FailureClass.Name(wire) == "FAILURE_CLASS_" + c.value
        assert failure_class_from_wire(wire) is c and failure_class_filter(wire) == c.value
    assert (
        failure_class_to_wire(None)
        == failure_class_to_wire("")
        == failure_class_pb2.FAILURE_CLASS_UNSPECIFIED
    )
    assert failure_class_to_wire("permanent") == failure_class_pb2.FAILURE_CLASS_PERMANENT
    assert failure_class_from_wire(failure_class_pb2.FAILURE_CLASS_UNSPECIFIED) is FailureClass.TRANSIENT
    assert failure_class_filter(failure_class_pb2.FAILURE_CLASS_UNSPECIFIED) is None
    with pytest.raises(ValueError):
        failure_class_filter(99)
