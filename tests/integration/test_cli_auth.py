"""``gnomon auth ...`` as a subprocess against the API's NamespaceService and AccessService served
in this event loop over a real PostgreSQL. The server runs insecure (every caller is the all-powerful
``insecure`` principal) because the CLI reads no credentials yet; authorization itself is covered by
test_admin_access.py and tests/unit/test_admin_policy.py."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from gnomon._proto.gnomon.v1 import access_service_pb2_grpc as ag
from gnomon._proto.gnomon.v1 import namespace_service_pb2_grpc as ng
from gnomon.api.access import AccessEngine
from gnomon.api.access_servicer import AccessServicer
from gnomon.api.namespace_servicer import NamespaceServicer
from gnomon.api.namespaces import NamespaceEngine
from gnomon.common.auth import keys
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage import tenancy
from gnomon_test_support import session_tls


@pytest.fixture
async def address(engine):
    server = GrpcServer(
        "127.0.0.1:0",
        [
            (
                ng.add_NamespaceServiceServicer_to_server,
                NamespaceServicer(NamespaceEngine(engine)),
                "gnomon.v1.NamespaceService",
            ),
            (
                ag.add_AccessServiceServicer_to_server,
                AccessServicer(AccessEngine(engine)),
                "gnomon.v1.AccessService",
            ),
        ],
        authenticator=Authenticator(None, insecure=True),
        credentials=session_tls(),
    )
    await server.start()
    await server.set_serving(True)
    try:
        yield server.address
    finally:
        await server.stop(0)


async def gnomon(address: str, *args: str) -> tuple[int, str, str]:
    env = dict(os.environ, GNOMON_API=address, COLUMNS="200")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gnomon.cli.main",
        "auth",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def ok(address: str, *args: str) -> str:
    rc, out, err = await gnomon(address, *args)
    assert rc == 0, f"{args}: rc={rc}\nstdout={out}\nstderr={err}"
    return out


async def test_namespace_commands(address):
    made = json.loads(
        await ok(
            address,
            "namespace",
            "create",
            "shop",
            "--description",
            "web shop",
            "--retention",
            "7d",
            "--max-pending-jobs",
            "100",
            "--max-streamed-queues",
            "30",
            "--json",
        )
    )
    assert (made["quotas"]["max_streamed_queues"], made["quotas"]["max_worker_streams_per_principal"]) == (
        30,
        0,
    )
    assert (made["name"], made["retention_s"], made["quotas"]["max_pending_jobs"], made["etag"]) == (
        "namespaces/shop",
        604800,
        100,
        "1",
    )
    upd = json.loads(
        await ok(address, "namespace", "update", "shop", "--max-create-rate", "5", "--etag", "1", "--json")
    )
    assert (upd["quotas"]["max_create_rate"], upd["quotas"]["max_pending_jobs"], upd["etag"]) == (5, 100, "2")
    upd = json.loads(
        await ok(
            address,
            "namespace",
            "update",
            "shop",
            "--max-worker-streams-per-principal",
            "8",
            "--max-queues-per-principal",
            "9",
            "--max-streamed-queues",
            "0",
            "--json",
        )
    )
    q = upd["quotas"]
    # 0 = back to the dispatcher's default
    assert (
        q["max_worker_streams_per_principal"],
        q["max_queues_per_principal"],
        q["max_streamed_queues"],
    ) == (8, 9, 0)
    rc, _, err = await gnomon(address, "namespace", "update", "shop", "--description", "x", "--etag", "1")
    assert rc == 1 and "FAILED_PRECONDITION" in err and "STALE_VERSION" in err
    listed = await ok(address, "namespace", "list")
    assert [line.split()[0] for line in listed.splitlines()] == ["NAMESPACE", "default", "shop"]
    assert "max_create_rate=5" in (await ok(address, "namespace", "get", "shop"))
    rc, _, err = await gnomon(address, "namespace", "update", "shop")
    assert rc == 2 and "nothing to change" in err
    assert (await ok(address, "namespace", "delete", "shop")).strip() == "deleted namespaces/shop"
    rc, _, err = await gnomon(address, "namespace", "get", "shop")
    assert rc == 1 and "NOT_FOUND" in err and "NAMESPACE_NOT_FOUND" in err


async def test_principal_key_and_grant_commands(address, engine):
    assert (
        await ok(address, "principal", "create", "ci", "--description", "build bot")
    ).strip() == "principals/ci"
    rc, out, err = await gnomon(
        address, "key", "create", "ci", "--description", "laptop", "--expires-in", "30d"
    )
    assert rc == 0, err
    token = out.strip()
    assert keys.parse(token) is not None and "cannot be shown again" in err
    key_id = keys.parse(token).id
    async with engine.connect() as c:  # the token works: its hash is what is stored
        record = await tenancy.load_key(c, key_id)
    assert record is not None and record.usable and keys.matches(keys.parse(token), record.secret_sha256)
    listed = json.loads(await ok(address, "key", "list", "ci", "--json"))
    assert [(k["id"], k["revoke_time"]) for k in listed] == [(key_id, None)]
    assert token not in json.dumps(listed)
    assert (
        await ok(address, "grant", "add", "ci", "worker", "default", "--queue", "builds", "-q", "docs")
    ).strip() == ("principals/ci: worker in default queues builds,docs")
    await ok(address, "grant", "add", "ci", "reader", "*")
    grants = json.loads(await ok(address, "grant", "list", "*", "--principal", "ci", "--json"))
    assert [(g["namespace"], g["role"], g["queues"]) for g in grants] == [
        ("*", "READER", []),
        ("default", "WORKER", ["builds", "docs"]),
    ]
    assert (await ok(address, "grant", "remove", "ci", "reader", "*")).strip() == "removed"
    assert (await ok(address, "grant", "remove", "ci", "reader", "*")).strip() == "not held (nothing changed)"
    assert (await ok(address, "key", "revoke", "ci", key_id)).startswith(
        f"revoked principals/ci/apiKeys/{key_id} at "
    )
    assert (await ok(address, "principal", "disable", "ci")).startswith("disabled principals/ci at ")
    rows = (await ok(address, "principal", "list")).splitlines()
    assert rows[1].split()[0] == "ci" and rows[1].split()[2] != "-"
    rc, _, err = await gnomon(address, "grant", "add", "ci", "superuser", "default")
    assert rc == 2 and "unknown role" in err
    rc, _, err = await gnomon(address, "principal", "create", "ci")
    assert rc == 1 and "PRINCIPAL_EXISTS" in err
    me = json.loads(await ok(address, "whoami", "--json"))
    assert (me["principal"], me["kind"]) == ("principals/insecure", "INSECURE")
