"""gnomon.common.rpc.inputs: NUL found at any depth of a request, by field path; clean requests pass."""

from __future__ import annotations

from google.protobuf import struct_pb2

from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import retry_pb2
from gnomon.common.rpc.inputs import MAX_REPORTED, nul_violations


def test_nul_is_reported_by_field_path_at_any_depth() -> None:
    req = js.BatchCreateJobsRequest(
        parent="namespaces/default",
        requests=[
            js.CreateJobRequest(queue="q"),
            js.CreateJobRequest(
                queue="q\x00", retry_policy=retry_pb2.RetryPolicy(non_retryable_errors=["ok", "E\x00"])
            ),
        ],
    )
    assert [v.field for v in nul_violations(req)] == [
        "requests[1].queue",
        "requests[1].retry_policy.non_retryable_errors[1]",
    ]


def test_map_keys_and_values_and_the_report_cap() -> None:
    s = struct_pb2.Struct()
    s.fields["a\x00"].string_value = "x"
    s.fields["b"].string_value = "y\x00"
    assert sorted(v.field for v in nul_violations(s)) == ["fields", "fields[b].string_value"]
    many = js.BatchCreateJobsRequest(requests=[js.CreateJobRequest(queue="\x00") for _ in range(50)])
    assert len(nul_violations(many)) == MAX_REPORTED


def test_clean_requests_have_no_violation() -> None:
    assert nul_violations(js.CreateJobRequest(queue="q", payload=b"\x00\x00", idempotency_key="k")) == []
