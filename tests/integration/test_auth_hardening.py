"""Authentication under attack: against a real secure suite (TLS, API keys, JWTs from a JWKS file; api,
dispatcher, planner and reaper processes) an unauthenticated caller with a hostile JWT gets
UNAUTHENTICATED, never INTERNAL, and cannot grow the API's log by a traceback per call; a HintService
method a service does not implement is UNIMPLEMENTED; a principal cannot be created with an id
reserved for the actors of other callers (``jwt:admin``)."""

from __future__ import annotations

import grpc
import pytest

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import access_service_pb2_grpc as agrpc
from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jgrpc
from gnomon.sdk.connection import resolve
from gnomon_jwt_support import Issuer
from gnomon_test_support import decode, running_suite

#: Calls made with each hostile token.
CALLS_PER_TOKEN = 300


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    return Issuer.create(tmp_path_factory.mktemp("idp"))


@pytest.fixture(scope="module")
def suite(pg_server, migrated_template, tmp_path_factory, idp):
    with running_suite(pg_server, migrated_template, tmp_path_factory.mktemp("authh"), env=idp.env()) as s:
        yield s


def tls_channel(address: str) -> grpc.Channel:
    """TLS with the suite's CA; credentials go per call."""
    ca = resolve(address).ca_file
    assert ca, "the test session's profile names the suite CA"
    with open(ca, "rb") as f:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def failure(fn, *args, **kw) -> tuple[grpc.StatusCode, str, list[str]]:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args, **kw)
    _, info, bad = decode(e.value)
    return e.value.code(), info.reason if info else "", [v.field for v in bad.field_violations] if bad else []


def log_of(suite, role: str) -> str:
    with open(next(p for p in suite.procs if p.role == role).log_path, errors="replace") as f:
        return f.read()


def test_hostile_jwts_are_unauthenticated_and_do_not_fill_the_log(suite, idp):
    get = jpb.GetJobRequest(name="namespaces/acme/jobs/00000000-0000-0000-0000-000000000000")
    with tls_channel(suite.api_address) as ch:
        stub = jgrpc.JobServiceStub(ch)
        # a genuine token of the issuer passes authentication (no grant: PERMISSION_DENIED, not UNAUTHENTICATED)
        assert failure(stub.GetJob, get, metadata=bearer(idp.token()), timeout=10)[0] == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        before = log_of(suite, "api")
        codes: dict[str, set] = {}
        for what, token in idp.hostile_tokens().items():
            for _ in range(CALLS_PER_TOKEN):
                code, reason, _ = failure(stub.GetJob, get, metadata=bearer(token), timeout=10)
                codes.setdefault(what, set()).add((code, reason))
    assert codes == {w: {(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")} for w in codes}, codes
    grown = log_of(suite, "api")[len(before) :]
    calls = CALLS_PER_TOKEN * len(codes)
    print(f"{calls} calls with hostile JWTs: {len(grown)} bytes, {len(grown.splitlines())} lines of API log")
    assert "Traceback" not in grown, grown[:2000]
    # at most one line per kind of verifier fault per interval, not one (or a traceback) per call
    assert len(grown.splitlines()) <= len(codes), f"{calls} refused calls wrote:\n{grown[:2000]}"


def test_a_hint_method_a_service_does_not_implement_is_unimplemented(suite):
    with open(suite.credentials.service_token_file) as f:
        service = bearer(f.read().strip())
    roles = {p.role: p.address for p in suite.procs}
    with tls_channel(roles["dispatcher"]) as ch:
        hints = hint_pb2_grpc.HintServiceStub(ch)
        hints.WakeDispatcher(hint_pb2.WakeDispatcherRequest(), metadata=service, timeout=10)  # served
        got = failure(
            hints.WakePlanner, hint_pb2.WakePlannerRequest(schedule="x"), metadata=service, timeout=10
        )
        assert got[:2] == (grpc.StatusCode.UNIMPLEMENTED, "METHOD_NOT_IMPLEMENTED")
    with tls_channel(roles["planner"]) as ch:
        hints = hint_pb2_grpc.HintServiceStub(ch)
        hints.WakePlanner(hint_pb2.WakePlannerRequest(schedule="x"), metadata=service, timeout=10)  # served
        got = failure(hints.WakeDispatcher, hint_pb2.WakeDispatcherRequest(), metadata=service, timeout=10)
        assert got[:2] == (grpc.StatusCode.UNIMPLEMENTED, "METHOD_NOT_IMPLEMENTED")
    for role in ("dispatcher", "planner"):
        assert "Traceback" not in log_of(suite, role), role


@pytest.mark.parametrize("principal_id", ["jwt:admin", "jwt:mallory", "cert:ops", "service", "insecure"])
def test_principal_ids_of_other_callers_actors_are_reserved(suite, principal_id):
    admin = bearer(suite.credentials.admin_key)
    with tls_channel(suite.api_address) as ch:
        access = agrpc.AccessServiceStub(ch)
        got = failure(
            access.CreatePrincipal,
            apb.CreatePrincipalRequest(principal_id=principal_id),
            metadata=admin,
            timeout=10,
        )
        assert got == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", ["principal_id"])
        ok = access.CreatePrincipal(
            apb.CreatePrincipalRequest(principal_id=f"ok-{principal_id.replace(':', '-')}"),
            metadata=admin,
            timeout=10,
        )
        assert ok.principal.name.startswith("principals/ok-")
