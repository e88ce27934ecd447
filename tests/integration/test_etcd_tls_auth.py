"""The etcd client over TLS and with an etcd user (``GNOMON_ETCD_CA_FILE``, ``GNOMON_ETCD_USERNAME``/
``PASSWORD``), against a real etcd serving the development certificate with auth enabled: the user's
token opens the way, no user or a wrong password does not, and a user without TLS is refused."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from gnomon._proto.etcd.api import rpc_pb2, rpc_pb2_grpc
from gnomon.common import devcerts
from gnomon.common.config import EtcdSettings
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.devservers import free_port
from gnomon_test_support import etcd_binary

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_etcd() -> Iterator[tuple[str, str]]:
    """An etcd serving TLS (the development server certificate) on loopback: (endpoint, CA file)."""
    d = tempfile.mkdtemp(prefix="gnomon-etcd-tls-")
    server = devcerts.ensure_server_cert(f"{d}/certs")
    cport, pport = free_port(), free_port()
    proc = subprocess.Popen(
        [
            etcd_binary(),
            *("--name", "t0", "--data-dir", f"{d}/data"),
            *("--listen-client-urls", f"https://127.0.0.1:{cport}"),
            *("--advertise-client-urls", f"https://127.0.0.1:{cport}"),
            *("--listen-peer-urls", f"http://127.0.0.1:{pport}"),
            *("--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}"),
            *("--initial-cluster", f"t0=http://127.0.0.1:{pport}"),
            *("--cert-file", server.cert_file, "--key-file", server.key_file),
            *("--unsafe-no-fsync", "--log-level", "error"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{cport}", f"{d}/certs/ca.pem"
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


async def _until_up(client: EtcdClient) -> None:
    for _ in range(200):
        with contextlib.suppress(EtcdError):
            await client.get(b"/probe")
            return
        await asyncio.sleep(0.05)
    raise AssertionError("etcd over TLS did not answer")


def _enable_auth(endpoint: str, ca: str) -> None:
    with open(ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(f.read())
    with grpc.secure_channel(endpoint, creds) as ch:
        auth = rpc_pb2_grpc.AuthStub(ch)
        auth.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="s3cret"), timeout=10)
        auth.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
        auth.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)


async def test_tls_to_several_endpoints_needs_one_server_name(tls_etcd) -> None:
    """Several endpoints become one gRPC target (``ipv4:a,b``) whose certificate check would take
    the whole list as one host name and refuse every member: without GNOMON_ETCD_TLS_SERVER_NAME the
    client refuses to start; with a name the certificates carry (``localhost``) it works. (Runs
    before the test below turns auth on.)"""
    endpoint, ca = tls_etcd
    two = f"{endpoint},{endpoint}"  # the same member twice: two addresses for the balancer
    with pytest.raises(ValueError, match="GNOMON_ETCD_TLS_SERVER_NAME"):
        EtcdClient.from_settings(EtcdSettings(endpoints=two, ca_file=ca))
    named = EtcdSettings(endpoints=two, ca_file=ca, tls_server_name="localhost")
    async with EtcdClient.from_settings(named, timeout=2) as c:
        await _until_up(c)
        await c.put(b"/t/several", b"ok")
        assert (await c.get(b"/t/several")).value == b"ok"  # type: ignore[union-attr]
    wrong = EtcdSettings(endpoints=two, ca_file=ca, tls_server_name="not-in-the-certificate")
    async with EtcdClient.from_settings(wrong, timeout=2) as c:
        with pytest.raises(EtcdError):
            await c.get(b"/t/several")


async def test_tls_then_an_etcd_user(tls_etcd) -> None:
    endpoint, ca = tls_etcd
    async with EtcdClient.from_settings(EtcdSettings(endpoints=endpoint, ca_file=ca), timeout=2) as tls_only:
        await _until_up(tls_only)
        await tls_only.put(b"/t/k", b"v")
        assert (await tls_only.get(b"/t/k")).value == b"v"  # type: ignore[union-attr]
    async with EtcdClient([endpoint], timeout=2) as plaintext:
        with pytest.raises(EtcdError):
            await plaintext.get(b"/t/k")  # a TLS listener does not speak plaintext

    await asyncio.to_thread(_enable_auth, endpoint, ca)
    user = EtcdSettings(endpoints=endpoint, ca_file=ca, username="root", password="s3cret")
    async with EtcdClient.from_settings(user, timeout=2) as c:
        await c.put(b"/t/k", b"w")
        assert (await c.get(b"/t/k")).value == b"w"  # type: ignore[union-attr]
    async with EtcdClient.from_settings(EtcdSettings(endpoints=endpoint, ca_file=ca), timeout=2) as anonymous:
        with pytest.raises(EtcdError) as refused:
            await anonymous.put(b"/t/k", b"x")
        assert "user name is empty" in str(refused.value)  # auth is on: no token, no write
    wrong = EtcdSettings(endpoints=endpoint, ca_file=ca, username="root", password="wrong")
    async with EtcdClient.from_settings(wrong, timeout=2) as c:
        with pytest.raises(EtcdError) as bad:
            await c.get(b"/t/k")
        assert "invalid user ID or password" in str(bad.value)


def test_a_user_without_tls_or_password_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="needs TLS"):
        EtcdClient.from_settings(EtcdSettings(username="root", password="x"))
    ca = devcerts.ensure_ca(str(tmp_path)).cert_file
    with pytest.raises(ValueError, match="PASSWORD"):
        EtcdClient.from_settings(EtcdSettings(username="root", ca_file=ca))
    with pytest.raises(ValueError, match="together"):
        EtcdClient.from_settings(EtcdSettings(cert_file=ca))
