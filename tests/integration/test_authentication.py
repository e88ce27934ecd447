"""Authentication and authorization through a real gRPC server (the API's JobService behind
:class:`GrpcServer` with the real :class:`Authenticator` and audit log) on a real PostgreSQL:
anonymous and forged credentials, two tenants and an intruder, revocation, JWTs from a JWKS file,
and the audit row of every mutating call with the authenticated principal."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import select

from gnomon._proto.gnomon.v1 import job_service_pb2 as jpb
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc
from gnomon.common.auth import keys
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.auth.jwt_verifier import JwtVerifier
from gnomon.common.auth.principals import ALL, Role
from gnomon.common.auth.settings import AuthSettings
from gnomon.common.rpc.audit import AuditLog
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage import tenancy
from gnomon.common.storage.schema import audit_log
from gnomon.common.storage.schema_tenancy import api_keys, principals
from gnomon_test_support import decode, job_service

ISSUER, AUDIENCE = "https://idp.example.test", "gnomon"


async def add_principal(engine, name: str, *grants: tuple[str, Role]) -> str:
    key = keys.generate()
    async with engine.begin() as conn:
        await tenancy.ensure_principal(conn, name)
        await tenancy.add_key(conn, name, key)
        for ns, role in grants:
            await tenancy.grant(conn, name, ns, role)
    return key.token


@pytest.fixture
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
async def server(engine, tmp_path, rsa_key):
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    settings = AuthSettings(jwt_issuer=ISSUER, jwt_audience=AUDIENCE, jwt_jwks_file=str(jwks))
    audit = AuditLog(engine, flush_s=0.05)
    authenticator = Authenticator(engine, jwt=JwtVerifier(settings), cache_s=0.0, service_token="s3rvice")
    srv = GrpcServer("127.0.0.1:0", [job_service(engine)], authenticator=authenticator, audit=audit)
    await srv.start()
    await srv.set_serving(True)
    channel = grpc.aio.insecure_channel(srv.address)
    try:
        yield job_service_pb2_grpc.JobServiceStub(channel), channel, audit
    finally:
        await channel.close()
        await srv.stop(0)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def create(ns: str) -> jpb.CreateJobRequest:
    return jpb.CreateJobRequest(parent=f"namespaces/{ns}", queue="q", payload=b"secret")


async def code_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    _, info, _ = decode(e.value)
    return e.value.code(), info.reason if info else ""


async def test_anonymous_and_forged_credentials_are_unauthenticated_but_health_is_open(server):
    stub, channel, _ = server
    assert await code_of(stub.CreateJob(create("acme"))) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "UNAUTHENTICATED",
    )
    forged = keys.generate().token
    for md in [bearer(forged), bearer("not-a-key"), (("authorization", "Basic YTpi"),), bearer("a.b.c")]:
        assert (await code_of(stub.GetJob(jpb.GetJobRequest(name="namespaces/acme/jobs/x"), metadata=md)))[
            0
        ] == grpc.StatusCode.UNAUTHENTICATED
    health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING


async def test_tenants_are_isolated_and_an_intruder_learns_nothing(server, engine):
    stub, _, _ = server
    alice = await add_principal(engine, "alice", ("acme", Role.CLIENT))
    mallory = await add_principal(engine, "mallory", ("evil", Role.CLIENT))
    job = (await stub.CreateJob(create("acme"), metadata=bearer(alice))).job
    got = (await stub.GetJob(jpb.GetJobRequest(name=job.name), metadata=bearer(alice))).job
    assert got.payload == b"secret"
    missing = f"namespaces/acme/jobs/{uuid.uuid4()}"
    # the same refusal whether or not the job exists: nothing is disclosed (AIP-211)
    for name in (job.name, missing):
        assert await code_of(stub.GetJob(jpb.GetJobRequest(name=name), metadata=bearer(mallory))) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "NAMESPACE_NOT_ALLOWED",
        )
    assert (await code_of(stub.CancelJob(jpb.CancelJobRequest(name=job.name), metadata=bearer(mallory))))[
        0
    ] == grpc.StatusCode.PERMISSION_DENIED
    assert (await code_of(stub.CreateJob(create("acme"), metadata=bearer(mallory))))[
        0
    ] == grpc.StatusCode.PERMISSION_DENIED
    assert (
        await code_of(stub.ListJobs(jpb.ListJobsRequest(parent="namespaces/acme"), metadata=bearer(mallory)))
    )[0] == grpc.StatusCode.PERMISSION_DENIED
    # the job is untouched by the intruder's attempts
    again = (await stub.GetJob(jpb.GetJobRequest(name=job.name), metadata=bearer(alice))).job
    assert again.state == got.state and again.version == got.version


async def test_reader_cannot_write_and_star_admin_can(server, engine):
    stub, _, _ = server
    reader = await add_principal(engine, "rita", ("acme", Role.READER))
    admin = await add_principal(engine, "root", (ALL, Role.ADMIN))
    assert (await code_of(stub.CreateJob(create("acme"), metadata=bearer(reader))))[
        0
    ] == grpc.StatusCode.PERMISSION_DENIED
    job = (await stub.CreateJob(create("anywhere"), metadata=bearer(admin))).job
    assert job.name.startswith("namespaces/anywhere/jobs/")
    assert (
        await stub.ListJobs(jpb.ListJobsRequest(parent="namespaces/acme"), metadata=bearer(reader))
    ).jobs == []


async def test_revoked_key_and_disabled_principal_are_refused(server, engine):
    stub, _, _ = server
    token = await add_principal(engine, "bob", ("acme", Role.CLIENT))
    await stub.CreateJob(create("acme"), metadata=bearer(token))
    async with engine.begin() as conn:
        await conn.execute(tenancy.revoke_key_stmt(keys.parse(token).id))
    assert await code_of(stub.CreateJob(create("acme"), metadata=bearer(token))) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "UNAUTHENTICATED",
    )
    other = await add_principal(engine, "carol", ("acme", Role.CLIENT))
    async with engine.begin() as conn:
        await conn.execute(
            principals.update().where(principals.c.name == "carol").values(disabled_at=time_now())
        )
    assert (await code_of(stub.CreateJob(create("acme"), metadata=bearer(other))))[
        0
    ] == grpc.StatusCode.UNAUTHENTICATED
    async with engine.connect() as conn:
        stored = (
            await conn.execute(select(api_keys.c.secret_sha256).where(api_keys.c.principal == "bob"))
        ).scalar_one()
    assert keys.parse(token).secret not in stored and stored == keys.parse(token).secret_sha256


def time_now():
    from datetime import UTC, datetime

    return datetime.now(UTC)


def make_jwt(rsa_key, **claims) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "dana@example.test",
        "exp": now + 300,
        "iat": now,
        **claims,
    }
    return jwt.encode(body, rsa_key, algorithm="RS256", headers={"kid": "k1"})


async def test_jwt_from_the_configured_issuer_maps_claims_to_grants(server, rsa_key):
    stub, _, _ = server
    token = make_jwt(rsa_key, permissions=["acme:client"])
    job = (await stub.CreateJob(create("acme"), metadata=bearer(token))).job
    assert job.name.startswith("namespaces/acme/")
    assert (await code_of(stub.CreateJob(create("evil"), metadata=bearer(token))))[
        0
    ] == grpc.StatusCode.PERMISSION_DENIED
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for bad in [
        make_jwt(other_key, permissions=["acme:client"]),  # not signed by the issuer
        make_jwt(rsa_key, permissions=["acme:client"], iss="https://evil.test"),
        make_jwt(rsa_key, permissions=["acme:client"], aud="someone-else"),
        make_jwt(rsa_key, permissions=["acme:client"], exp=int(time.time()) - 3600),
    ]:
        assert (await code_of(stub.CreateJob(create("acme"), metadata=bearer(bad))))[
            0
        ] == grpc.StatusCode.UNAUTHENTICATED


async def test_every_mutating_call_is_audited_with_the_real_principal(server, engine):
    stub, _, audit = server
    token = await add_principal(engine, "erin", ("acme", Role.CLIENT))
    md = (*bearer(token), ("x-gnomon-actor", "somebody-else"))
    job = (await stub.CreateJob(create("acme"), metadata=md)).job
    await stub.GetJob(jpb.GetJobRequest(name=job.name), metadata=md)  # a read: not audited
    bad = jpb.CreateJobRequest(parent="namespaces/acme", queue="BAD QUEUE")
    assert (await code_of(stub.CreateJob(bad, metadata=md)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    await stub.CancelJob(jpb.CancelJobRequest(name=job.name), metadata=md)
    await audit.flush()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(audit_log).order_by(audit_log.c.created_at))).mappings().all()
    got = [(r["actor"], r["namespace"], r["action"], r["resource"], r["outcome"]) for r in rows]
    assert got == [
        ("erin", "acme", "CreateJob", job.name, "OK"),
        ("erin", "acme", "CreateJob", "namespaces/acme", "INVALID_ARGUMENT"),
        ("erin", "acme", "CancelJob", job.name, "OK"),
    ]
    assert all(r["peer"].startswith("ipv4:127.0.0.1") for r in rows)


async def test_service_token_is_not_a_tenant(server):
    stub, _, _ = server
    assert (
        await code_of(
            stub.GetJob(jpb.GetJobRequest(name="namespaces/acme/jobs/x"), metadata=bearer("s3rvice"))
        )
    )[0] == grpc.StatusCode.PERMISSION_DENIED


async def test_concurrent_calls_share_one_verification(server, engine):
    stub, _, _ = server
    token = await add_principal(engine, "fay", ("acme", Role.CLIENT))
    jobs = await asyncio.gather(*(stub.CreateJob(create("acme"), metadata=bearer(token)) for _ in range(20)))
    assert len({j.job.name for j in jobs}) == 20


async def test_refused_calls_are_audited_against_the_namespace_they_aimed_at(server, engine):
    stub, _, audit = server
    owner = await add_principal(engine, "gina", ("acme", Role.CLIENT))
    intruder = await add_principal(engine, "hank", ("evil", Role.CLIENT))
    job = (await stub.CreateJob(create("acme"), metadata=bearer(owner))).job
    assert (await code_of(stub.CancelJob(jpb.CancelJobRequest(name=job.name), metadata=bearer(intruder))))[
        0
    ] == grpc.StatusCode.PERMISSION_DENIED
    nul = jpb.CreateJobRequest(parent="namespaces/acme", queue="q\x00")
    assert (await code_of(stub.CreateJob(nul, metadata=bearer(owner))))[0] == grpc.StatusCode.INVALID_ARGUMENT
    # without a valid credential nothing is recorded (nobody to record; no log flooding)
    await code_of(stub.CancelJob(jpb.CancelJobRequest(name=job.name), metadata=bearer(keys.generate().token)))
    await audit.flush()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(audit_log).order_by(audit_log.c.created_at))).mappings().all()
    got = [(r["actor"], r["namespace"], r["action"], r["outcome"]) for r in rows]
    assert got == [
        ("gina", "acme", "CreateJob", "OK"),
        ("hank", "acme", "CancelJob", "PERMISSION_DENIED"),
        ("gina", "acme", "CreateJob", "INVALID_ARGUMENT"),
    ]
