"""NamespaceService and AccessService end to end: real gRPC with the real authenticating server
(API keys checked against a real PostgreSQL, the method policy enforced by the interceptor), the
API's JobService and ScheduleService beside them with namespace quotas.

The server runs in the test's event loop, built like ``gnomon api`` builds it (one QuotaGuard shared
by the job, schedule and namespace servicers); the credential cache is 0.2 s so a revoked key is
refused within that window (polled, never slept on). A ``root`` principal with admin on ``*`` is
bootstrapped straight into storage, as ``gnomon dev`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import func, select

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import access_service_pb2_grpc as ag
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon._proto.gnomon.v1 import namespace_service_pb2_grpc as ng
from gnomon._proto.gnomon.v1 import schedule_pb2
from gnomon._proto.gnomon.v1 import schedule_service_pb2 as spb
from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc as sg
from gnomon.api.access import AccessEngine
from gnomon.api.access_servicer import AccessServicer
from gnomon.api.jobs import JobEngine
from gnomon.api.namespace_servicer import NamespaceServicer
from gnomon.api.namespaces import NamespaceEngine
from gnomon.api.quotas import QuotaGuard
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.api.servicer import JobServicer
from gnomon.common.auth import keys
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.auth.principals import ALL, Role
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.scheduling.engine import ScheduleEngine
from gnomon.common.storage import tenancy
from gnomon.common.storage.schema import jobs
from gnomon_test_support import decode, wait_until

CACHE_S = 0.2


@dataclass
class Api:
    """Stubs on one channel to the test server, the root token and the engine."""

    jobs: jg.JobServiceStub
    schedules: sg.ScheduleServiceStub
    namespaces: ng.NamespaceServiceStub
    access: ag.AccessServiceStub
    root: str
    engine: object
    address: str


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


@pytest.fixture
async def api(engine):
    quotas = QuotaGuard(engine)
    services = [
        (
            jg.add_JobServiceServicer_to_server,
            JobServicer(JobEngine(engine, wake_dispatchers=None), region="local", shards=4, quotas=quotas),
            "gnomon.v1.JobService",
        ),
        (
            sg.add_ScheduleServiceServicer_to_server,
            ScheduleServicer(
                ScheduleEngine(engine, shards=4, catchup_rate=20, catchup_burst=20),
                region="local",
                quotas=quotas,
            ),
            "gnomon.v1.ScheduleService",
        ),
        (
            ng.add_NamespaceServiceServicer_to_server,
            NamespaceServicer(NamespaceEngine(engine, quotas=quotas)),
            "gnomon.v1.NamespaceService",
        ),
        (
            ag.add_AccessServiceServicer_to_server,
            AccessServicer(AccessEngine(engine)),
            "gnomon.v1.AccessService",
        ),
    ]
    server = GrpcServer("127.0.0.1:0", services, authenticator=Authenticator(engine, cache_s=CACHE_S))
    await server.start()
    await server.set_serving(True)
    root = keys.generate()
    async with engine.begin() as c:
        await tenancy.ensure_principal(c, "root", "bootstrap admin")
        await tenancy.add_key(c, "root", root)
        await tenancy.grant(c, "root", ALL, Role.ADMIN)
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield Api(
            jg.JobServiceStub(channel),
            sg.ScheduleServiceStub(channel),
            ng.NamespaceServiceStub(channel),
            ag.AccessServiceStub(channel),
            root.token,
            engine,
            server.address,
        )
    finally:
        await channel.close()
        await server.stop(0)


async def refused(call, code: grpc.StatusCode) -> tuple:
    """Awaits ``call`` (a coroutine of a unary RPC), asserts it fails with ``code``; returns
    ``(status, ErrorInfo, BadRequest)``."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    return decode(err.value)


def retry_info(err_status) -> error_details_pb2.RetryInfo | None:
    for d in err_status.details:
        if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            d.Unpack(info)
            return info
    return None


async def count_jobs(engine, namespace: str) -> int:
    async with engine.connect() as c:
        q = select(func.count()).select_from(jobs).where(jobs.c.namespace == namespace)
        return (await c.execute(q)).scalar_one()


async def new_key(api: Api, principal: str, *, role: Role | None, namespace: str = "") -> str:
    """Creates ``principal`` (with ``role`` in ``namespace`` if given) and a key; returns its token."""
    md = bearer(api.root)
    await api.access.CreatePrincipal(apb.CreatePrincipalRequest(principal_id=principal), metadata=md)
    if role is not None:
        await api.access.GrantRole(
            apb.GrantRoleRequest(
                principal=f"principals/{principal}", namespace=namespace, role="ROLE_" + role.name
            ),
            metadata=md,
        )
    got = await api.access.CreateApiKey(
        apb.CreateApiKeyRequest(parent=f"principals/{principal}"), metadata=md
    )
    assert got.token.startswith(f"gnk_{got.api_key.id}_")
    return str(got.token)


def create(ns: str, delay_s: int = 3600) -> js.CreateJobRequest:
    return js.CreateJobRequest(
        parent=f"namespaces/{ns}", queue="q", delay=duration_pb2.Duration(seconds=delay_s)
    )


async def test_default_namespace_exists_after_migration(api):
    got = await api.namespaces.GetNamespace(
        npb.GetNamespaceRequest(name="namespaces/default"), metadata=bearer(api.root)
    )
    assert got.namespace.name == "namespaces/default"
    assert got.namespace.quotas == npb.NamespaceQuotas()
    _, info, bad = await refused(
        api.namespaces.DeleteNamespace(
            npb.DeleteNamespaceRequest(name="namespaces/default"), metadata=bearer(api.root)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [v.field for v in bad.field_violations] == ["name"]


async def test_client_key_works_in_its_namespace_only_and_revocation_takes_effect(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(namespace_id="team-a", namespace=npb.Namespace(description="A")),
        metadata=md,
    )
    token = await new_key(api, "app-a", role=Role.CLIENT, namespace="team-a")
    job = (await api.jobs.CreateJob(create("team-a"), metadata=bearer(token))).job
    assert job.name.startswith("namespaces/team-a/jobs/")
    _, info, _ = await refused(
        api.jobs.CreateJob(create("team-b"), metadata=bearer(token)), grpc.StatusCode.PERMISSION_DENIED
    )
    assert info.reason == "NAMESPACE_NOT_ALLOWED" and info.metadata["namespace"] == "team-b"
    assert await count_jobs(api.engine, "team-b") == 0
    # a client may not administer access
    _, info, _ = await refused(
        api.access.CreatePrincipal(apb.CreatePrincipalRequest(principal_id="x"), metadata=bearer(token)),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert info.reason == "NAMESPACE_NOT_ALLOWED"

    keys_ = (
        await api.access.ListApiKeys(apb.ListApiKeysRequest(parent="principals/app-a"), metadata=md)
    ).api_keys
    assert len(keys_) == 1 and not keys_[0].HasField("revoke_time")
    revoked = (
        await api.access.RevokeApiKey(apb.RevokeApiKeyRequest(name=keys_[0].name), metadata=md)
    ).api_key
    assert revoked.HasField("revoke_time")

    async def refused_now() -> bool:
        try:
            await api.jobs.GetJob(js.GetJobRequest(name=job.name), metadata=bearer(token))
        except grpc.aio.AioRpcError as e:
            return e.code() == grpc.StatusCode.UNAUTHENTICATED
        return False

    await wait_until(refused_now, 10 * CACHE_S + 5, "the revoked key to be refused")
    _, info, _ = await refused(
        api.jobs.GetJob(js.GetJobRequest(name=job.name), metadata=bearer(token)),
        grpc.StatusCode.UNAUTHENTICATED,
    )
    assert info.reason == "UNAUTHENTICATED"


async def test_disabled_principal_and_revoked_grant_are_refused(api):
    md = bearer(api.root)
    token = await new_key(api, "app-d", role=Role.READER, namespace="default")
    await api.jobs.ListJobs(js.ListJobsRequest(parent="namespaces/default"), metadata=bearer(token))
    removed = await api.access.RevokeRole(
        apb.RevokeRoleRequest(principal="principals/app-d", namespace="default", role=apb.ROLE_READER),
        metadata=md,
    )
    assert removed.removed

    async def denied() -> bool:
        try:
            await api.jobs.ListJobs(js.ListJobsRequest(parent="namespaces/default"), metadata=bearer(token))
        except grpc.aio.AioRpcError as e:
            return e.code() == grpc.StatusCode.PERMISSION_DENIED
        return False

    await wait_until(denied, 10 * CACHE_S + 5, "the revoked grant to take effect")
    p = (
        await api.access.DisablePrincipal(apb.DisablePrincipalRequest(name="principals/app-d"), metadata=md)
    ).principal
    assert p.HasField("disable_time")

    async def unauthenticated() -> bool:
        try:
            await api.access.WhoAmI(apb.WhoAmIRequest(), metadata=bearer(token))
        except grpc.aio.AioRpcError as e:
            return e.code() == grpc.StatusCode.UNAUTHENTICATED
        return False

    await wait_until(unauthenticated, 10 * CACHE_S + 5, "the disabled principal to be refused")


async def test_whoami_and_list_namespaces_filter_by_grants(api):
    md = bearer(api.root)
    for ns in ("ns-a", "ns-b", "ns-c"):
        await api.namespaces.CreateNamespace(npb.CreateNamespaceRequest(namespace_id=ns), metadata=md)
    token = await new_key(api, "viewer", role=Role.READER, namespace="ns-b")
    await api.access.GrantRole(
        apb.GrantRoleRequest(
            principal="principals/viewer", namespace="ns-c", role=apb.ROLE_WORKER, queues=["emails"]
        ),
        metadata=md,
    )
    me = await api.access.WhoAmI(apb.WhoAmIRequest(), metadata=bearer(token))
    assert me.principal == "principals/viewer"
    assert me.kind == apb.PRINCIPAL_KIND_API_KEY
    assert [(g.namespace, g.role, list(g.queues)) for g in me.grants] == [
        ("ns-b", apb.ROLE_READER, []),
        ("ns-c", apb.ROLE_WORKER, ["emails"]),
    ]
    mine = await api.namespaces.ListNamespaces(npb.ListNamespacesRequest(), metadata=bearer(token))
    assert [n.name for n in mine.namespaces] == ["namespaces/ns-b", "namespaces/ns-c"]
    names, token_ = [], ""
    while True:  # root sees all, a page of 2 at a time
        page = await api.namespaces.ListNamespaces(
            npb.ListNamespacesRequest(page_size=2, page_token=token_), metadata=md
        )
        names += [n.name for n in page.namespaces]
        token_ = page.next_page_token
        if not token_:
            break
    assert names == ["namespaces/default", "namespaces/ns-a", "namespaces/ns-b", "namespaces/ns-c"]
    # a reader of ns-b may read it, not ns-a; whether ns-a exists is not revealed
    await api.namespaces.GetNamespace(npb.GetNamespaceRequest(name="namespaces/ns-b"), metadata=bearer(token))
    for name in ("namespaces/ns-a", "namespaces/nope"):
        await refused(
            api.namespaces.GetNamespace(npb.GetNamespaceRequest(name=name), metadata=bearer(token)),
            grpc.StatusCode.PERMISSION_DENIED,
        )
    grants = await api.access.ListGrants(apb.ListGrantsRequest(namespace="ns-c"), metadata=md)
    assert [(g.principal, g.role) for g in grants.grants] == [("principals/viewer", apb.ROLE_WORKER)]


async def test_namespace_crud_etag_and_errors(api):
    md = bearer(api.root)
    ns = (
        await api.namespaces.CreateNamespace(
            npb.CreateNamespaceRequest(
                namespace_id="crud",
                namespace=npb.Namespace(
                    description="d",
                    retention=duration_pb2.Duration(seconds=86400),
                    quotas=npb.NamespaceQuotas(max_schedules=3),
                ),
            ),
            metadata=md,
        )
    ).namespace
    assert (ns.etag, ns.retention.seconds, ns.quotas.max_schedules) == ("1", 86400, 3)
    _, info, _ = await refused(
        api.namespaces.CreateNamespace(npb.CreateNamespaceRequest(namespace_id="crud"), metadata=md),
        grpc.StatusCode.ALREADY_EXISTS,
    )
    assert info.reason == "NAMESPACE_EXISTS"
    upd = (
        await api.namespaces.UpdateNamespace(
            npb.UpdateNamespaceRequest(
                namespace=npb.Namespace(
                    name="namespaces/crud", etag="1", quotas=npb.NamespaceQuotas(max_pending_jobs=7)
                ),
                update_mask=field_mask_pb2.FieldMask(paths=["quotas.max_pending_jobs"]),
            ),
            metadata=md,
        )
    ).namespace
    assert (upd.etag, upd.description, upd.quotas.max_schedules, upd.quotas.max_pending_jobs) == (
        "2",
        "d",
        3,
        7,
    )
    _, info, _ = await refused(
        api.namespaces.UpdateNamespace(
            npb.UpdateNamespaceRequest(
                namespace=npb.Namespace(name="namespaces/crud", etag="1", description="x")
            ),
            metadata=md,
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert info.reason == "STALE_VERSION" and info.metadata["etag"] == "2"
    _, _, bad = await refused(
        api.namespaces.CreateNamespace(
            npb.CreateNamespaceRequest(
                namespace_id="Bad_Id",
                namespace=npb.Namespace(
                    retention=duration_pb2.Duration(seconds=-1),
                    quotas=npb.NamespaceQuotas(max_create_rate=-1, max_queues_per_hello=101),
                ),
            ),
            metadata=md,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert sorted(v.field for v in bad.field_violations) == [
        "namespace.quotas.max_create_rate",
        "namespace.quotas.max_queues_per_hello",
        "namespace.retention",
        "namespace_id",
    ]
    await api.jobs.CreateJob(create("crud"), metadata=md)
    _, info, _ = await refused(
        api.namespaces.DeleteNamespace(npb.DeleteNamespaceRequest(name="namespaces/crud"), metadata=md),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert info.reason == "NAMESPACE_NOT_EMPTY"
    await api.namespaces.CreateNamespace(npb.CreateNamespaceRequest(namespace_id="empty"), metadata=md)
    await api.namespaces.DeleteNamespace(npb.DeleteNamespaceRequest(name="namespaces/empty"), metadata=md)
    _, info, _ = await refused(
        api.namespaces.GetNamespace(npb.GetNamespaceRequest(name="namespaces/empty"), metadata=md),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == "NAMESPACE_NOT_FOUND"


async def test_access_errors_map_to_documented_codes(api):
    md = bearer(api.root)
    await api.access.CreatePrincipal(apb.CreatePrincipalRequest(principal_id="dup"), metadata=md)
    cases = [
        (
            api.access.CreatePrincipal(apb.CreatePrincipalRequest(principal_id="dup"), metadata=md),
            grpc.StatusCode.ALREADY_EXISTS,
            "PRINCIPAL_EXISTS",
        ),
        (
            api.access.GetPrincipal(apb.GetPrincipalRequest(name="principals/ghost"), metadata=md),
            grpc.StatusCode.NOT_FOUND,
            "PRINCIPAL_NOT_FOUND",
        ),
        (
            api.access.CreateApiKey(apb.CreateApiKeyRequest(parent="principals/ghost"), metadata=md),
            grpc.StatusCode.NOT_FOUND,
            "PRINCIPAL_NOT_FOUND",
        ),
        (
            api.access.RevokeApiKey(
                apb.RevokeApiKeyRequest(name="principals/dup/apiKeys/0123456789abcdef"), metadata=md
            ),
            grpc.StatusCode.NOT_FOUND,
            "API_KEY_NOT_FOUND",
        ),
        (
            api.access.GrantRole(
                apb.GrantRoleRequest(principal="principals/ghost", namespace="default", role=apb.ROLE_READER),
                metadata=md,
            ),
            grpc.StatusCode.NOT_FOUND,
            "PRINCIPAL_NOT_FOUND",
        ),
        (
            api.access.GrantRole(
                apb.GrantRoleRequest(
                    principal="principals/dup", namespace="default", role=apb.ROLE_CLIENT, queues=["q"]
                ),
                metadata=md,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_FIELD",
        ),
        (
            api.access.WhoAmI(apb.WhoAmIRequest(), metadata=bearer("gnk_0123456789abcdef_nope")),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        ),
        (api.access.WhoAmI(apb.WhoAmIRequest()), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
    ]
    for call, code, reason in cases:
        _, info, _ = await refused(call, code)
        assert info.reason == reason
    got = (
        await api.access.GetPrincipal(apb.GetPrincipalRequest(name="principals/root"), metadata=md)
    ).principal
    assert [(g.namespace, g.role) for g in got.grants] == [("*", apb.ROLE_ADMIN)]


async def test_quotas_refuse_with_retry_info_and_write_nothing(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="slow", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_create_rate=0.01))
        ),
        metadata=md,
    )
    await api.jobs.CreateJob(create("slow"), metadata=md)  # the one token of the bucket
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.jobs.CreateJob(create("slow"), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(err.value)
    _, info, _ = decode(err.value)
    assert (info.reason, info.metadata["quota"], info.metadata["namespace"]) == (
        "QUOTA_EXCEEDED",
        "max_create_rate",
        "slow",
    )
    delay = retry_info(status)
    assert delay is not None and delay.retry_delay.seconds >= 90  # 1 token at 0.01/s
    assert await count_jobs(api.engine, "slow") == 1

    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="small", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_pending_jobs=2))
        ),
        metadata=md,
    )
    batch = js.BatchCreateJobsRequest(parent="namespaces/small", requests=[create("small")] * 3)
    _, info, _ = await refused(
        api.jobs.BatchCreateJobs(batch, metadata=md), grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert info.metadata["quota"] == "max_pending_jobs"
    assert await count_jobs(api.engine, "small") == 0
    await api.jobs.CreateJob(create("small"), metadata=md)
    await api.jobs.CreateJob(create("small"), metadata=md)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.jobs.CreateJob(create("small"), metadata=md)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_info(rpc_status.from_call(err.value)).retry_delay.seconds == 1
    assert await count_jobs(api.engine, "small") == 2

    await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(
            namespace_id="sched", namespace=npb.Namespace(quotas=npb.NamespaceQuotas(max_schedules=1))
        ),
        metadata=md,
    )
    sched = schedule_pb2.Schedule(cron="0 * * * *", job_template=schedule_pb2.JobTemplate(queue="q"))
    await api.schedules.CreateSchedule(
        spb.CreateScheduleRequest(parent="namespaces/sched", schedule_id="one", schedule=sched), metadata=md
    )
    _, info, _ = await refused(
        api.schedules.CreateSchedule(
            spb.CreateScheduleRequest(parent="namespaces/sched", schedule_id="two", schedule=sched),
            metadata=md,
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert (info.reason, info.metadata["quota"], info.metadata["limit"]) == (
        "QUOTA_EXCEEDED",
        "max_schedules",
        "1",
    )
    listed = await api.schedules.ListSchedules(
        spb.ListSchedulesRequest(parent="namespaces/sched"), metadata=md
    )
    assert [s.name for s in listed.schedules] == ["namespaces/sched/schedules/one"]
    # a namespace without a row has no limits
    await api.jobs.BatchCreateJobs(
        js.BatchCreateJobsRequest(parent="namespaces/free", requests=[create("free")] * 5), metadata=md
    )
    assert await count_jobs(api.engine, "free") == 5


async def test_sdk_manages_namespaces_principals_keys_and_grants(api):
    from gnomon.sdk import AsyncClient, GnomonError, NamespaceQuotas

    async with AsyncClient(api.address, metadata=bearer(api.root)) as c:
        ns = await c.create_namespace(
            "sdk", description="via sdk", retention=3600, quotas=NamespaceQuotas(max_schedules=2)
        )
        assert (ns.id, ns.retention.total_seconds(), ns.quotas.max_schedules) == ("sdk", 3600, 2)
        ns = await c.update_namespace("sdk", quotas={"max_pending_jobs": 9}, etag=ns.etag)
        assert (ns.quotas.max_pending_jobs, ns.quotas.max_schedules, ns.etag) == (9, 2, "2")
        assert [n.id async for n in c.list_namespaces(page_size=1)] == ["default", "sdk"]
        p = await c.create_principal("ops", "operators")
        assert p.name == "principals/ops"
        g = await c.grant_role("ops", "worker", "sdk", ["emails"])
        assert (g.role, g.queues, g.namespace) == ("WORKER", ("emails",), "sdk")
        created = await c.create_api_key("ops", "laptop")
        assert created.token.startswith("gnk_" + created.key.id)
        assert [k.id async for k in c.list_api_keys("ops")] == [created.key.id]
        assert [(x.principal, x.role) async for x in c.list_grants("sdk")] == [("principals/ops", "WORKER")]
        assert (await c.get_principal("ops")).grants == (g,)
        assert (await c.revoke_api_key("ops", created.key.id)).revoke_time is not None
        assert await c.revoke_role("ops", "worker", "sdk")
        assert (await c.disable_principal("ops")).disable_time is not None
        me = await c.whoami()
        assert (me.principal, me.kind, [(x.namespace, x.role) for x in me.grants]) == (
            "principals/root",
            "API_KEY",
            [("*", "ADMIN")],
        )
        await c.delete_namespace("sdk")
        with pytest.raises(GnomonError) as e:
            await c.get_namespace("sdk")
        assert e.value.reason == "NAMESPACE_NOT_FOUND"
        with pytest.raises(ValueError):
            await c.grant_role("ops", "superuser", "sdk")
