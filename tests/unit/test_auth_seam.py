"""The authorization seam (gnomon.common.rpc.auth): who the caller is, which namespace a request names,
and the namespace check the interceptor applies to DeadLetterService (PERMISSION_DENIED)."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon.common.errors import PermissionDenied
from gnomon.common.rpc import auth


def test_caller_from_metadata():
    c = auth.Caller.from_metadata(
        [("X-Gnomon-Namespaces", "acme, other,"), ("x-gnomon-actor", b" bob\x00\n ")], "ipv4:1.2.3.4:5"
    )
    assert c.namespaces == {"acme", "other"}
    assert (c.actor_header, c.actor) == ("bob", "bob (ipv4:1.2.3.4:5)")
    anyone = auth.Caller.from_metadata([], "")
    assert anyone.namespaces is None and anyone.actor == "unknown"
    long = auth.Caller.from_metadata([("x-gnomon-actor", "a" * 500)], "p")
    assert len(long.actor_header) == auth.MAX_ACTOR


def test_authorize():
    c = auth.Caller(frozenset({"acme"}), "", "p")
    auth.authorize(c, "acme")
    with pytest.raises(PermissionDenied) as e:
        auth.authorize(c, "evil")
    assert e.value.reason == "NAMESPACE_NOT_ALLOWED" and e.value.metadata == {"namespace": "evil"}
    auth.authorize(auth.ANONYMOUS, "evil")  # no gateway header: every namespace


def test_request_namespace():
    assert auth.request_namespace(dpb.ListDeadLettersRequest(parent="namespaces/acme")) == "acme"
    assert auth.request_namespace(dpb.ListDeadLettersRequest()) == "default"  # empty parent
    assert auth.request_namespace(dpb.ListDeadLettersRequest(parent="bad")) is None  # the handler reports it
    assert auth.request_namespace(jpb.GetJobRequest(name="namespaces/x/jobs/1")) == "x"
    assert auth.request_namespace(jpb.GetJobRequest()) is None
    assert auth.request_namespace(spb.PreviewScheduleRequest(name="namespaces/s/schedules/a")) == "s"


def test_current_caller_without_the_interceptor():
    assert auth.current_caller(None) is auth.ANONYMOUS
    assert "gnomon.v1.DeadLetterService" in auth.ENFORCED_SERVICES
    assert "gnomon.v1.JobService" not in auth.ENFORCED_SERVICES  # no new rejections before authentication
