"""Authorization decisions for NamespaceService and AccessService (no server): every RPC of both
services has a rule, and the rules give each role what docs/security.md says."""

from __future__ import annotations

import pytest

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import namespace_service_pb2 as npb
from gnomon.api.namespace_servicer import visible_namespaces
from gnomon.common.auth.authenticator import INSECURE, SERVICE
from gnomon.common.auth.policy import POLICY
from gnomon.common.auth.principals import ALL, Grant, Principal, PrincipalKind, Role
from gnomon.common.errors import InvalidArgument, PermissionDenied
from gnomon.common.rpc.auth import authorize


def who(*grants: tuple[str, Role]) -> Principal:
    return Principal("p", PrincipalKind.API_KEY, tuple(Grant(ns, role) for ns, role in grants))


ROOT = who((ALL, Role.ADMIN))
ADMIN_A = who(("a", Role.ADMIN))
READER_A = who(("a", Role.READER))
CLIENT_A = who(("a", Role.CLIENT))


@pytest.mark.parametrize("pb", [npb, apb])
def test_every_method_has_a_rule(pb):
    for service in pb.DESCRIPTOR.services_by_name.values():
        for m in service.methods:
            assert f"/{service.full_name}/{m.name}" in POLICY, m.full_name


def call(method: str, principal: Principal, request) -> str | None:
    return authorize(principal, POLICY[method], request)


NS = "/gnomon.v1.NamespaceService/"
AC = "/gnomon.v1.AccessService/"

ALLOWED = [
    (NS + "CreateNamespace", ROOT, npb.CreateNamespaceRequest(namespace_id="x")),
    (NS + "GetNamespace", READER_A, npb.GetNamespaceRequest(name="namespaces/a")),
    (
        NS + "UpdateNamespace",
        ADMIN_A,
        npb.UpdateNamespaceRequest(namespace=npb.Namespace(name="namespaces/a")),
    ),
    (NS + "ListNamespaces", READER_A, npb.ListNamespacesRequest()),
    (AC + "GrantRole", ADMIN_A, apb.GrantRoleRequest(namespace="a")),
    (AC + "RevokeRole", ADMIN_A, apb.RevokeRoleRequest(namespace="a")),
    (AC + "ListGrants", ADMIN_A, apb.ListGrantsRequest(namespace="a")),
    (AC + "ListGrants", ROOT, apb.ListGrantsRequest(namespace="*")),
    (AC + "CreateApiKey", ROOT, apb.CreateApiKeyRequest(parent="principals/x")),
    (AC + "WhoAmI", CLIENT_A, apb.WhoAmIRequest()),
]

DENIED = [
    (NS + "CreateNamespace", ADMIN_A, npb.CreateNamespaceRequest(namespace_id="a")),
    (NS + "DeleteNamespace", ADMIN_A, npb.DeleteNamespaceRequest(name="namespaces/a")),
    (NS + "GetNamespace", READER_A, npb.GetNamespaceRequest(name="namespaces/b")),
    (
        NS + "UpdateNamespace",
        READER_A,
        npb.UpdateNamespaceRequest(namespace=npb.Namespace(name="namespaces/a")),
    ),
    (
        NS + "UpdateNamespace",
        ADMIN_A,
        npb.UpdateNamespaceRequest(namespace=npb.Namespace(name="namespaces/b")),
    ),
    (AC + "GrantRole", ADMIN_A, apb.GrantRoleRequest(namespace="b")),
    (AC + "GrantRole", ADMIN_A, apb.GrantRoleRequest(namespace="*")),
    (AC + "GrantRole", CLIENT_A, apb.GrantRoleRequest(namespace="a")),
    (AC + "ListGrants", ADMIN_A, apb.ListGrantsRequest(namespace="*")),
    (AC + "CreatePrincipal", ADMIN_A, apb.CreatePrincipalRequest(principal_id="x")),
    (AC + "CreateApiKey", ADMIN_A, apb.CreateApiKeyRequest(parent="principals/x")),
    (AC + "RevokeApiKey", CLIENT_A, apb.RevokeApiKeyRequest(name="principals/x/apiKeys/0123456789abcdef")),
    (AC + "DisablePrincipal", ADMIN_A, apb.DisablePrincipalRequest(name="principals/x")),
]


@pytest.mark.parametrize(("method", "principal", "request_"), ALLOWED)
def test_allowed(method, principal, request_):
    call(method, principal, request_)


@pytest.mark.parametrize(("method", "principal", "request_"), DENIED)
def test_denied(method, principal, request_):
    with pytest.raises(PermissionDenied) as e:
        call(method, principal, request_)
    assert e.value.reason == "NAMESPACE_NOT_ALLOWED"


def test_grant_requests_without_a_namespace_are_invalid_before_any_handler():
    with pytest.raises(InvalidArgument) as e:
        call(AC + "GrantRole", ROOT, apb.GrantRoleRequest(namespace=""))
    assert [v.field for v in e.value.violations] == ["namespace"]


def test_namespace_listing_filter():
    assert visible_namespaces(who(("b", Role.READER), ("a", Role.WORKER), ("a", Role.CLIENT))) == ["a", "b"]
    assert visible_namespaces(who(("b", Role.READER), ("c", Role.WORKER))) == ["b"]
    assert visible_namespaces(who()) == []
    assert visible_namespaces(ROOT) is None
    assert visible_namespaces(who((ALL, Role.READER))) is None
    assert visible_namespaces(INSECURE) is None
    # namespace.read is what counts: a worker grant (lease only) and the service identity list nothing
    assert visible_namespaces(who(("a", Role.WORKER), (ALL, Role.WORKER))) == []
    assert visible_namespaces(SERVICE) == []
