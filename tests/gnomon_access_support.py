"""Helpers of the namespace and access tests (tests/integration/test_admin_access.py,
test_namespace_quotas.py, test_namespace_admin_limits.py): the API's job, schedule, dead-letter,
namespace and access services served in the test's
event loop with the real authenticator over the test database, built like ``gnomon api`` builds them
(one QuotaGuard shared by the job, schedule, dead-letter and namespace servicers; mutating calls
audited to the database, :attr:`Api.audit` flushes them); the credential cache is
:data:`CACHE_S` so revocations are seen quickly (tests poll, never sleep). A ``root`` principal with
admin on ``*`` is bootstrapped straight into storage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from sqlalchemy import func, select

from gnomon._proto.gnomon.v1 import access_service_pb2 as apb
from gnomon._proto.gnomon.v1 import access_service_pb2_grpc as ag
from gnomon._proto.gnomon.v1 import dead_letter_service_pb2_grpc as dg
from gnomon._proto.gnomon.v1 import job_service_pb2 as js
from gnomon._proto.gnomon.v1 import job_service_pb2_grpc as jg
from gnomon._proto.gnomon.v1 import namespace_service_pb2_grpc as ng
from gnomon._proto.gnomon.v1 import schedule_service_pb2_grpc as sg
from gnomon.api.access import AccessEngine
from gnomon.api.access_servicer import AccessServicer
from gnomon.api.dead_letter_servicer import DeadLetterServicer
from gnomon.api.dead_letters import DeadLetterEngine
from gnomon.api.jobs import JobEngine
from gnomon.api.namespace_servicer import NamespaceServicer
from gnomon.api.namespaces import NamespaceEngine
from gnomon.api.quotas import QuotaGuard
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.api.servicer import JobServicer
from gnomon.common.auth import keys
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.auth.principals import ALL, Role
from gnomon.common.rpc.audit import AuditLog
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.scheduling.engine import ScheduleEngine
from gnomon.common.storage import tenancy
from gnomon.common.storage.schema import jobs
from gnomon_test_support import decode, session_tls, tls_aio_channel

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
    dead_letters: dg.DeadLetterServiceStub
    audit: AuditLog


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


@asynccontextmanager
async def serving_api(engine) -> AsyncIterator[Api]:
    """The API's job, schedule, namespace and access services on a free port with the real
    authenticator (credential cache :data:`CACHE_S`), a ``root`` admin on ``*`` bootstrapped."""
    quotas = QuotaGuard(engine)
    services = [
        (
            jg.add_JobServiceServicer_to_server,
            JobServicer(JobEngine(engine, wake_dispatchers=None), region="local", shards=4),
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
            dg.add_DeadLetterServiceServicer_to_server,
            DeadLetterServicer(DeadLetterEngine(engine, shards=4, wake_dispatchers=None)),
            "gnomon.v1.DeadLetterService",
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
    audit = AuditLog(engine)
    server = GrpcServer(
        "127.0.0.1:0",
        services,
        authenticator=Authenticator(engine, cache_s=CACHE_S),
        audit=audit,
        credentials=session_tls(),
        admitter=quotas.admitter,
    )
    await server.start()
    await server.set_serving(True)
    root = keys.generate()
    async with engine.begin() as c:
        await tenancy.ensure_principal(c, "root", "bootstrap admin")
        await tenancy.add_key(c, "root", root)
        await tenancy.grant(c, "root", ALL, Role.ADMIN)
    channel = tls_aio_channel(server.address)
    try:
        yield Api(
            jg.JobServiceStub(channel),
            sg.ScheduleServiceStub(channel),
            ng.NamespaceServiceStub(channel),
            ag.AccessServiceStub(channel),
            root.token,
            engine,
            server.address,
            dg.DeadLetterServiceStub(channel),
            audit,
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
