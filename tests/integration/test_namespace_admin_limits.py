"""What a namespace's own admin may not do, and what namespace ids and principals leak, end to end
over real gRPC with the authenticating server (gnomon_access_support) and a real PostgreSQL:
quotas and retention need the admin role in ``*``; ListNamespaces lists only namespaces the caller
may read; DeleteNamespace drops the namespace's grants; GrantRole is no oracle of principals.
The cluster-wide audit entries: test_cluster_audit.py."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon.common.auth.principals import Role
from gnomon.common.domain.reasons import ErrorReason
from gnomon_access_support import bearer, count_jobs, create, new_key, refused, serving_api


@pytest.fixture
async def api(engine):
    async with serving_api(engine) as a:
        yield a


async def _namespace(api, ns: str, **fields) -> npb.Namespace:
    got = await api.namespaces.CreateNamespace(
        npb.CreateNamespaceRequest(namespace_id=ns, namespace=npb.Namespace(**fields)),
        metadata=bearer(api.root),
    )
    return got.namespace


async def _fresh_key(api, principal: str) -> list[tuple[str, str]]:
    """Metadata with a new key of existing ``principal`` (its grants are read anew on first use)."""
    got = await api.access.CreateApiKey(
        apb.CreateApiKeyRequest(parent=f"principals/{principal}"), metadata=bearer(api.root)
    )
    return bearer(got.token)


def _update(ns: str, paths: list[str], **fields) -> npb.UpdateNamespaceRequest:
    return npb.UpdateNamespaceRequest(
        namespace=npb.Namespace(name=f"namespaces/{ns}", **fields),
        update_mask=field_mask_pb2.FieldMask(paths=paths),
    )


async def test_namespace_admin_may_change_the_description_but_not_quotas_or_retention(api):
    stored = await _namespace(
        api,
        "capped",
        retention=duration_pb2.Duration(seconds=86400),
        quotas=npb.NamespaceQuotas(max_pending_jobs=5, max_schedules=2),
    )
    admin = bearer(await new_key(api, "ns-admin", role=Role.ADMIN, namespace="capped"))
    for paths in (["quotas"], ["quotas.max_pending_jobs"], ["retention"], ["description", "quotas"], []):
        _, info, _ = await refused(
            api.namespaces.UpdateNamespace(_update("capped", paths, description="mine"), metadata=admin),
            grpc.StatusCode.PERMISSION_DENIED,
        )
        assert info.reason == ErrorReason.NAMESPACE_NOT_ALLOWED
        assert info.metadata["namespace"] == "capped"
    now = (
        await api.namespaces.GetNamespace(
            npb.GetNamespaceRequest(name="namespaces/capped"), metadata=bearer(api.root)
        )
    ).namespace
    assert now == stored  # nothing written: same etag, quotas, retention, description

    got = await api.namespaces.UpdateNamespace(
        _update("capped", ["description"], description="team notes"), metadata=admin
    )
    assert (got.namespace.description, got.namespace.quotas) == ("team notes", stored.quotas)
    # the cluster admin may
    got = await api.namespaces.UpdateNamespace(
        _update("capped", ["quotas.max_pending_jobs"], quotas=npb.NamespaceQuotas(max_pending_jobs=9)),
        metadata=bearer(api.root),
    )
    assert got.namespace.quotas.max_pending_jobs == 9


async def test_retention_with_out_of_range_nanos_is_invalid(api):
    await _namespace(api, "nanos")
    bad = duration_pb2.Duration(seconds=0, nanos=1_000_000_000)
    _, _, violations = await refused(
        api.namespaces.UpdateNamespace(
            _update("nanos", ["retention"], retention=bad), metadata=bearer(api.root)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [v.field for v in violations.field_violations] == ["namespace.retention"]
    _, _, violations = await refused(
        api.namespaces.CreateNamespace(
            npb.CreateNamespaceRequest(namespace_id="nanos2", namespace=npb.Namespace(retention=bad)),
            metadata=bearer(api.root),
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [v.field for v in violations.field_violations] == ["namespace.retention"]


async def test_list_namespaces_shows_only_namespaces_the_caller_may_read(api):
    await _namespace(api, "secret", description="private plans")
    await _namespace(api, "open", description="public")
    worker = bearer(await new_key(api, "w-only", role=Role.WORKER, namespace="secret"))
    listed = await api.namespaces.ListNamespaces(npb.ListNamespacesRequest(), metadata=worker)
    assert list(listed.namespaces) == []
    await api.access.GrantRole(
        apb.GrantRoleRequest(principal="principals/w-only", namespace="open", role=apb.ROLE_READER),
        metadata=bearer(api.root),
    )
    reader = await _fresh_key(api, "w-only")
    listed = await api.namespaces.ListNamespaces(npb.ListNamespacesRequest(), metadata=reader)
    assert [n.name for n in listed.namespaces] == ["namespaces/open"]
    everything = await api.namespaces.ListNamespaces(npb.ListNamespacesRequest(), metadata=bearer(api.root))
    assert {"namespaces/open", "namespaces/secret"} <= {n.name for n in everything.namespaces}


async def test_delete_namespace_drops_its_grants(api):
    md = bearer(api.root)
    await _namespace(api, "reborn")
    await new_key(api, "old-owner", role=Role.CLIENT, namespace="reborn")
    await api.access.GrantRole(
        apb.GrantRoleRequest(principal="principals/old-owner", namespace="default", role=apb.ROLE_READER),
        metadata=md,
    )
    await api.namespaces.DeleteNamespace(npb.DeleteNamespaceRequest(name="namespaces/reborn"), metadata=md)
    left = await api.access.ListGrants(apb.ListGrantsRequest(namespace="reborn"), metadata=md)
    assert list(left.grants) == []
    mine = await api.access.ListGrants(
        apb.ListGrantsRequest(namespace="*", principal="principals/old-owner"), metadata=md
    )
    assert [g.namespace for g in mine.grants] == ["default"]  # grants elsewhere stay

    await _namespace(api, "reborn")
    token = await _fresh_key(api, "old-owner")
    await refused(api.jobs.CreateJob(create("reborn"), metadata=token), grpc.StatusCode.PERMISSION_DENIED)
    assert await count_jobs(api.engine, "reborn") == 0


async def test_grant_role_by_a_namespace_admin_does_not_reveal_whether_a_principal_exists(api):
    await _namespace(api, "probe")
    admin = bearer(await new_key(api, "probe-admin", role=Role.ADMIN, namespace="probe"))
    await new_key(api, "exists", role=None)
    answers = []
    for who in ("exists", "no-such-principal"):
        got = await api.access.GrantRole(
            apb.GrantRoleRequest(principal=f"principals/{who}", namespace="probe", role=apb.ROLE_READER),
            metadata=admin,
        )
        answers.append((got.grant.namespace, got.grant.role))
    assert answers[0] == answers[1] == ("probe", apb.ROLE_READER)
    # the cluster admin, who may list principals anyway, is told
    _, info, _ = await refused(
        api.access.GrantRole(
            apb.GrantRoleRequest(principal="principals/nobody", namespace="probe", role=apb.ROLE_READER),
            metadata=bearer(api.root),
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == ErrorReason.PRINCIPAL_NOT_FOUND
