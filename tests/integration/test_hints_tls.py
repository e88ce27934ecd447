"""Hints between services over TLS: a dispatcher's HintService (served as ``secure_server`` serves it:
TLS, the authenticator with the service token) is woken by :class:`DispatcherHints` that trusts the
CA and presents the service token; a sender without the token is refused and wakes nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon.common.auth.authenticator import Authenticator, read_secret_file
from gnomon.common.auth.settings import AuthSettings, TlsSettings
from gnomon.common.coordination.hints import DispatcherHints
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.tls import server_credentials, service_call_parts, service_channel_credentials
from gnomon.dispatcher.servicer import HintServicer
from gnomon_test_support import session_credentials, wait_until


class _Fixed(DispatcherHints):
    """Hints to one known address instead of the etcd registry."""

    def __init__(self, address: str, credentials) -> None:
        super().__init__(None, "/unused", "local", credentials=credentials)  # type: ignore[arg-type]
        self.address = address

    async def _targets(self) -> list[str]:
        return [self.address]


@pytest.fixture
async def dispatcher_hints():
    creds = session_credentials()
    assert creds is not None
    token = read_secret_file(creds.service_token_file)
    wake = asyncio.Event()
    server = GrpcServer(
        "127.0.0.1:0",
        [
            (
                hint_pb2_grpc.add_HintServiceServicer_to_server,
                HintServicer(wake),
                hint_pb2.DESCRIPTOR.services_by_name["HintService"].full_name,
            )
        ],
        authenticator=Authenticator(None, service_token=token),
        credentials=server_credentials(TlsSettings(cert_file=creds.cert_file, key_file=creds.key_file)),
    )
    await server.start()
    await server.set_serving(True)
    try:
        yield server.address, wake, creds
    finally:
        await server.stop(0)


async def test_a_hint_with_the_service_token_over_tls_wakes_the_dispatcher(dispatcher_hints):
    address, wake, creds = dispatcher_hints
    channel_creds = service_channel_credentials(
        TlsSettings(ca_file=creds.ca_file), AuthSettings(service_token_file=creds.service_token_file), False
    )
    hints = _Fixed(address, channel_creds)
    hints.wake(datetime.now(UTC))
    await wait_until(wake.is_set, 10, "the dispatcher woken by the hint")
    assert not hints._refused


async def test_a_hint_without_the_service_token_is_refused(dispatcher_hints, caplog):
    address, wake, creds = dispatcher_hints
    no_token = service_channel_credentials(TlsSettings(ca_file=creds.ca_file), AuthSettings(), False)
    hints = _Fixed(address, no_token)
    hints.wake(datetime.now(UTC))
    await wait_until(lambda: hints._refused, 10, "the refusal of a hint without the service token")
    assert not wake.is_set()
    assert "refused" in caplog.text


async def test_a_hint_with_the_service_token_as_call_metadata_wakes_the_dispatcher(dispatcher_hints):
    """The default path of the services: TLS credentials and the token as per-call metadata
    (service_call_parts), no call-credentials plugin."""
    address, wake, creds = dispatcher_hints
    tls, metadata = service_call_parts(
        TlsSettings(ca_file=creds.ca_file), AuthSettings(service_token_file=creds.service_token_file), False
    )
    assert metadata and metadata[0][0] == "authorization"
    hints = _Fixed(address, tls)
    hints._metadata = metadata
    hints.wake(datetime.now(UTC))
    await wait_until(wake.is_set, 10, "the dispatcher woken by the hint")
    assert not hints._refused
    assert service_call_parts(TlsSettings(ca_file=creds.ca_file), AuthSettings(), True) == (None, ())
