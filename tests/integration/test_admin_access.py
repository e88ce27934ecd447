"""NamespaceService and AccessService end to end: real gRPC with the real authenticating server
(API keys checked against a real PostgreSQL, the method policy enforced by the interceptor), the
API's JobService beside them (gnomon_access_support builds the server); and the SDK's part for them.
Quotas: test_namespace_quotas.py."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon.common.auth.principals import Role
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import REASONS
from gnomon_access_support import CACHE_S, bearer, count_jobs, create, new_key, refused, serving_api
from gnomon_test_support import wait_until


@pytest.fixture
async def api(engine):
    async with serving_api(engine) as a:
        yield a


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
    # ns-c, where it is only a worker (no namespace.read), is not listed
    assert [n.name for n in mine.namespaces] == ["namespaces/ns-b"]
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
        assert REASONS[ErrorReason(reason)][0] == code  # the documented code (docs/errors.md)
    got = (
        await api.access.GetPrincipal(apb.GetPrincipalRequest(name="principals/root"), metadata=md)
    ).principal
    assert [(g.namespace, g.role) for g in got.grants] == [("*", apb.ROLE_ADMIN)]


async def test_sdk_manages_namespaces_principals_keys_and_grants(api):
    from gnomon.sdk import AsyncClient, GnomonError, NamespaceQuotas

    async with AsyncClient(api.address, api_key=api.root) as c:
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
