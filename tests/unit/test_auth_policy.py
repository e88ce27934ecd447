"""The access model (gnomon.common.auth): roles and permissions, which namespace a request names,
the policy table covering every served method (deny by default), API keys, the JWT claim mapper and
hello authorization. Pure logic; the interceptor against real servers is in tests/integration."""

from __future__ import annotations

from typing import Any

import pytest

from gnomon._proto.gnomon.internal.v1 import hint_pb2
from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    dead_letter_service_pb2,
    job_service_pb2,
    queue_service_pb2,
    schedule_pb2,
    schedule_service_pb2,
    worker_service_pb2,
)
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon.common.auth import keys
from gnomon.common.auth.authenticator import INSECURE, SERVICE, bearer_token
from gnomon.common.auth.jwt_verifier import map_permissions
from gnomon.common.auth.policy import POLICY, Scope
from gnomon.common.auth.principals import ALL, Grant, Permission, Principal, PrincipalKind, Role
from gnomon.common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from gnomon.common.rpc.auth import authorize, request_namespace
from gnomon.dispatcher.hello import Hello, authorize_hello

SERVED = [
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"],
    schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"],
    queue_service_pb2.DESCRIPTOR.services_by_name["QueueService"],
    dead_letter_service_pb2.DESCRIPTOR.services_by_name["DeadLetterService"],
    cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"],
    worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"],
    hint_pb2.DESCRIPTOR.services_by_name["HintService"],
]


def user(*grants: Grant) -> Principal:
    return Principal("alice", PrincipalKind.API_KEY, tuple(grants))


@pytest.mark.parametrize("service", SERVED, ids=lambda s: s.full_name)
def test_every_served_method_has_a_rule(service):
    missing = [m.name for m in service.methods if f"/{service.full_name}/{m.name}" not in POLICY]
    assert missing == []


def test_mutating_methods_are_the_writes():
    mutating = {m.rsplit("/", 1)[1] for m, r in POLICY.items() if r.mutating and "JobService" in m}
    assert mutating == {"CreateJob", "BatchCreateJobs", "CancelJob", "RescheduleJob"}


@pytest.mark.parametrize(
    ("role", "allowed", "denied"),
    [
        (
            Role.READER,
            {Permission.JOBS_READ, Permission.DEAD_LETTERS_READ},
            {Permission.JOBS_WRITE, Permission.LEASE},
        ),
        (
            Role.CLIENT,
            {Permission.JOBS_WRITE, Permission.SCHEDULES_WRITE},
            {Permission.QUEUES_WRITE, Permission.AUDIT_READ},
        ),
        (Role.OPERATOR, {Permission.QUEUES_WRITE, Permission.DEAD_LETTERS_REPLAY}, {Permission.AUDIT_READ}),
        (
            Role.ADMIN,
            {Permission.AUDIT_READ, Permission.NAMESPACE_ADMIN},
            {Permission.LEASE, Permission.SERVICE},
        ),
        (Role.WORKER, {Permission.LEASE}, {Permission.JOBS_READ, Permission.JOBS_WRITE}),
    ],
)
def test_roles(role, allowed, denied):
    p = user(Grant("acme", role))
    for perm in allowed:
        assert p.can(perm, "acme") and not p.can(perm, "other") and not p.can(perm, ALL)
    for perm in denied:
        assert not p.can(perm, "acme")


def test_star_grant_covers_every_namespace_and_cluster_methods():
    p = user(Grant(ALL, Role.ADMIN))
    assert p.can(Permission.JOBS_WRITE, "anything") and p.can(Permission.NAMESPACE_ADMIN, ALL)
    assert not p.can(Permission.SERVICE, ALL)
    assert SERVICE.can(Permission.SERVICE, ALL) and not SERVICE.can(Permission.JOBS_READ, "acme")
    assert INSECURE.can(Permission.JOBS_WRITE, "x") and INSECURE.can(Permission.SERVICE, ALL)


def test_request_namespace_sources():
    rule = POLICY["/gnomon.v1.DeadLetterService/ListDeadLetters"]
    assert request_namespace(dpb.ListDeadLettersRequest(parent="namespaces/acme"), rule) == ("acme", "parent")
    assert request_namespace(dpb.ListDeadLettersRequest(), rule) == ("default", "parent")
    assert request_namespace(dpb.ListDeadLettersRequest(parent="x/y/alice"), rule)[0] is None
    get = POLICY["/gnomon.v1.JobService/GetJob"]
    assert request_namespace(jpb.GetJobRequest(name="namespaces/x/jobs/1"), get) == ("x", "name")
    update = POLICY["/gnomon.v1.ScheduleService/UpdateSchedule"]
    req = spb.UpdateScheduleRequest(schedule=schedule_pb2.Schedule(name="namespaces/s/schedules/a"))
    assert request_namespace(req, update) == ("s", "schedule.name")


def test_authorize_refuses_without_disclosure():
    p = user(Grant("acme", Role.CLIENT))
    get = POLICY["/gnomon.v1.JobService/GetJob"]
    assert authorize(p, get, jpb.GetJobRequest(name="namespaces/acme/jobs/1")) == "acme"
    with pytest.raises(PermissionDenied) as e:
        authorize(p, get, jpb.GetJobRequest(name="namespaces/other/jobs/1"))
    assert e.value.reason == "NAMESPACE_NOT_ALLOWED" and e.value.metadata == {"namespace": "other"}
    with pytest.raises(InvalidArgument):  # a malformed name never reaches a handler unchecked
        authorize(p, get, jpb.GetJobRequest(name="x/y/alice"))
    replay = POLICY["/gnomon.v1.DeadLetterService/ReplayDeadLetters"]
    with pytest.raises(PermissionDenied):  # a client may not replay
        authorize(p, replay, dpb.ReplayDeadLettersRequest(parent="namespaces/acme"))
    hint = POLICY["/gnomon.internal.v1.HintService/WakeDispatcher"]
    with pytest.raises(PermissionDenied):
        authorize(user(Grant(ALL, Role.ADMIN)), hint, hint_pb2.WakeDispatcherRequest())
    assert authorize(SERVICE, hint, hint_pb2.WakeDispatcherRequest()) is None
    preview = POLICY["/gnomon.v1.ScheduleService/PreviewSchedule"]
    assert authorize(user(), preview, spb.PreviewScheduleRequest()) is None  # a bare rule reads no namespace
    with pytest.raises(PermissionDenied):
        authorize(user(), preview, spb.PreviewScheduleRequest(name="namespaces/acme/schedules/a"))
    assert POLICY["/gnomon.v1.WorkerService/Lease"].scope is Scope.STREAM


def test_api_keys():
    k = keys.generate()
    assert keys.parse(k.token) == k and k.token.startswith("gnk_")
    assert keys.matches(k, k.secret_sha256) and not keys.matches(keys.generate(), k.secret_sha256)
    assert k.secret not in k.secret_sha256 and len(k.secret_sha256) == 64
    for bad in ["", "gnk_", "gnk_zz_x", f"gnk_{k.id}", f"gnk_{k.id}_", "Bearer x", f"gnk_{k.id.upper()}_s"]:
        assert keys.parse(bad) is None


def test_bearer_token():
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("x-other", "1")]) is None
    with pytest.raises(Unauthenticated):
        bearer_token([("authorization", "Bearer a"), ("authorization", "Bearer b")])  # never merged
    with pytest.raises(Unauthenticated):
        bearer_token([("authorization", "Basic YTpi")])


def test_jwt_permission_claims():
    grants = map_permissions(
        ["acme:client", "acme:worker:emails,reports", "*:reader", "bad ns:admin", "acme:root", 7, "b:worker"]
    )
    assert grants == (
        Grant("*", Role.READER),
        Grant("acme", Role.CLIENT),
        Grant("acme", Role.WORKER, ("emails", "reports")),
        Grant("b", Role.WORKER, ("*",)),
    )


def test_hello_takes_namespace_and_queues_from_the_grant():
    w = user(Grant("acme", Role.WORKER, ("emails",)))
    h = Hello("w1", "default", ["emails"], 10)
    assert authorize_hello(h, w, namespace_given=False).namespace == "acme"  # its one worker namespace
    assert authorize_hello(Hello("w1", "acme", ["emails"], 10), w, namespace_given=True).queues == ["emails"]
    with pytest.raises(PermissionDenied) as e:
        authorize_hello(Hello("w1", "other", ["emails"], 10), w, namespace_given=True)
    assert e.value.reason == "NAMESPACE_NOT_ALLOWED"
    with pytest.raises(PermissionDenied) as e:
        authorize_hello(Hello("w1", "acme", ["emails", "payroll"], 10), w, namespace_given=True)
    assert e.value.reason == "QUEUE_NOT_GRANTED" and e.value.metadata["queue"] == "payroll"
    with pytest.raises(PermissionDenied):  # a client is not a worker
        authorize_hello(
            Hello("w1", "acme", ["emails"], 10), user(Grant("acme", Role.ADMIN)), namespace_given=True
        )
    anyq = user(Grant(ALL, Role.WORKER, ("*",)))
    assert authorize_hello(Hello("w1", "zeta", ["q"], 1), anyq, namespace_given=True).namespace == "zeta"


def test_simulate_outage_is_a_read_of_the_namespace_its_name_or_parent_names():
    rule = POLICY["/gnomon.v1.ScheduleService/SimulateOutage"]
    assert not rule.mutating
    one = spb.SimulateOutageRequest(name="namespaces/other/schedules/a")
    # an empty parent does not stand for `default` when a name is given: the name's namespace is checked
    assert request_namespace(one, rule) == ("other", "name")
    assert request_namespace(spb.SimulateOutageRequest(parent="namespaces/acme"), rule) == ("acme", "parent")
    assert request_namespace(spb.SimulateOutageRequest(), rule) == ("default", "parent")
    reader = user(Grant("acme", Role.READER))
    assert authorize(reader, rule, spb.SimulateOutageRequest(name="namespaces/acme/schedules/a")) == "acme"
    with pytest.raises(PermissionDenied):
        authorize(reader, rule, one)
    with pytest.raises(PermissionDenied):
        authorize(user(Grant("default", Role.READER)), rule, one)


def test_interceptors_wrap_a_method_once_and_rewrap_a_new_handler() -> None:
    """Both server interceptors keep one wrapper per method (built on its first call) and build a
    new one when the inner handler object changes; the authentication interceptor wraps a served
    method, a public one (health) and reflection each as its rule says, once."""
    import asyncio

    import grpc

    from gnomon.common.auth.authenticator import Authenticator
    from gnomon.common.rpc.auth import AuthInterceptor
    from gnomon.common.rpc.errors import ErrorInterceptor

    async def hello(request, context):
        return request

    first: Any = grpc.unary_unary_rpc_method_handler(hello)
    second: Any = grpc.unary_unary_rpc_method_handler(hello)

    def intercept(interceptor, method: str, handler):
        details = type("D", (), {"method": method})()

        async def continuation(_):
            return handler

        return asyncio.run(interceptor.intercept_service(continuation, details))

    get = "/gnomon.v1.JobService/GetJob"
    for interceptor in (ErrorInterceptor(), AuthInterceptor(Authenticator(None, insecure=True))):
        a, b, c = (intercept(interceptor, get, h) for h in (first, first, second))
        assert a is b and a is not first
        assert c is not a and c.unary_unary is not a.unary_unary
        assert intercept(interceptor, get, second) is c

    auth = AuthInterceptor(Authenticator(None, insecure=True), reflection="open")
    health = intercept(auth, "/grpc.health.v1.Health/Check", first)
    assert health is not first and intercept(auth, "/grpc.health.v1.Health/Check", first) is health
    reflection = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
    assert intercept(auth, reflection, first) is first  # open reflection: served as it is
