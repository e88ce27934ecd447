"""The cluster-wide audit entries (namespace ``*``: principals, keys, namespaces, grants in ``*``)
through ``ListAuditEntries(parent="namespaces/*")``: readable with audit.read in ``*`` only, over real
gRPC with the authenticating, auditing server (gnomon_access_support) and a real PostgreSQL."""

from __future__ import annotations

import grpc
import pytest

from gnomon._proto.gnomon.v1 import dead_letter_service_pb2 as dpb
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon.common.auth.principals import Role
from gnomon.common.domain.reasons import ErrorReason
from gnomon_access_support import bearer, new_key, refused, serving_api


@pytest.fixture
async def api(engine):
    async with serving_api(engine) as a:
        yield a


async def test_cluster_audit_entries_are_read_with_audit_read_in_star_only(api):
    md = bearer(api.root)
    await api.namespaces.CreateNamespace(npb.CreateNamespaceRequest(namespace_id="audited"), metadata=md)
    admin = bearer(await new_key(api, "aud-admin", role=Role.ADMIN, namespace="audited"))
    await api.audit.flush()
    got = await api.dead_letters.ListAuditEntries(
        dpb.ListAuditEntriesRequest(parent="namespaces/*", page_size=1000), metadata=md
    )
    actions = {e.action for e in got.audit_entries}
    assert {"CreateNamespace", "CreatePrincipal", "CreateApiKey"} <= actions
    assert all(e.name.startswith("namespaces/*/auditEntries/") for e in got.audit_entries)

    _, info, _ = await refused(
        api.dead_letters.ListAuditEntries(dpb.ListAuditEntriesRequest(parent="namespaces/*"), metadata=admin),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    assert info.reason == ErrorReason.NAMESPACE_NOT_ALLOWED
    own = await api.dead_letters.ListAuditEntries(
        dpb.ListAuditEntriesRequest(parent="namespaces/audited"), metadata=admin
    )
    assert all(e.name.startswith("namespaces/audited/") for e in own.audit_entries)
    # other methods do not take namespaces/* as a parent, even from the cluster admin
    await refused(
        api.jobs.ListJobs(js.ListJobsRequest(parent="namespaces/*"), metadata=md),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
