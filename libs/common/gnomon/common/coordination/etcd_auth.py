"""How the services reach etcd securely: TLS (``GNOMON_ETCD_CA_FILE``, client certificate
``GNOMON_ETCD_CERT_FILE``/``KEY_FILE``) and etcd's own users (``GNOMON_ETCD_USERNAME`` with
``GNOMON_ETCD_PASSWORD`` or ``GNOMON_ETCD_PASSWORD_FILE``).

With a user, :class:`TokenPlugin` calls ``Auth.Authenticate`` (on a separate blocking channel, from
gRPC's credentials thread) and sends the token etcd returns as ``token`` metadata on every call,
re-authenticating after ``token_ttl_s`` seconds or when told the token was refused
(:meth:`TokenPlugin.invalidate`). gRPC attaches call credentials only over TLS, and a password must
not cross the network in clear anyway, so a user without TLS is refused (``ValueError``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc

from gnomon._proto.etcd.api import rpc_pb2, rpc_pb2_grpc
from gnomon.common.config import EtcdSettings

__all__ = ["TokenPlugin", "etcd_credentials"]


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class TokenPlugin(grpc.AuthMetadataPlugin):
    """Call credentials of an etcd user: the ``token`` of ``Auth.Authenticate(username, password)``
    against ``target`` over ``tls``, cached ``token_ttl_s`` seconds (below etcd's simple-token TTL,
    300 s by default). A failed authentication fails the call with that error (UNAVAILABLE or
    INVALID_ARGUMENT for wrong credentials, as etcd says)."""

    def __init__(
        self,
        target: str,
        tls: grpc.ChannelCredentials,
        username: str,
        password: str,
        token_ttl_s: float = 240.0,
        server_name: str = "",
    ) -> None:
        """``server_name``: checked against etcd's certificate instead of ``target``'s host."""
        self.target, self.tls, self.username, self.password = target, tls, username, password
        self.options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def token(self, timeout: float = 5.0) -> str:
        """The current token, authenticating first if there is none or it is old. Raises
        ``grpc.RpcError`` when etcd refuses or cannot be reached."""
        with self._lock:
            if self._token is None or time.monotonic() >= self._expires:
                with grpc.secure_channel(self.target, self.tls, options=self.options) as channel:
                    stub: Any = rpc_pb2_grpc.AuthStub(channel)  # type: ignore[no-untyped-call]
                    resp = stub.Authenticate(
                        rpc_pb2.AuthenticateRequest(name=self.username, password=self.password),
                        timeout=timeout,
                    )
                self._token, self._expires = str(resp.token), time.monotonic() + self.token_ttl_s
            return self._token

    def invalidate(self) -> None:
        """Forgets the token (etcd said it is invalid): the next call authenticates again."""
        with self._lock:
            self._token = None

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        try:
            token = self.token()
        except grpc.RpcError as exc:
            callback((), exc)
            return
        callback((("token", token),), None)


def etcd_credentials(
    settings: EtcdSettings, target: str | None = None
) -> tuple[grpc.ChannelCredentials | None, TokenPlugin | None]:
    """The channel credentials for etcd as ``settings`` say, and the token plugin when a user is set:
    ``(None, None)`` for plaintext (no CA, certificate or user). ``target``: where ``Authenticate``
    goes (default: the first endpoint). Raises ``ValueError`` for a user without TLS, a certificate
    without its key, or a user without a password; ``OSError`` for unreadable files."""
    s = settings
    if bool(s.cert_file) != bool(s.key_file):
        raise ValueError("GNOMON_ETCD_CERT_FILE and GNOMON_ETCD_KEY_FILE must be set together")
    tls_wanted = bool(s.ca_file or s.cert_file)
    if s.username and not tls_wanted:
        raise ValueError(
            "GNOMON_ETCD_USERNAME needs TLS to etcd (GNOMON_ETCD_CA_FILE): a password is never sent in clear"
        )
    if not tls_wanted:
        return None, None
    tls = grpc.ssl_channel_credentials(
        root_certificates=_read(s.ca_file) if s.ca_file else None,
        private_key=_read(s.key_file) if s.key_file else None,
        certificate_chain=_read(s.cert_file) if s.cert_file else None,
    )
    if not s.username:
        return tls, None
    password = _read(s.password_file).decode().strip() if s.password_file else s.password
    if not password:
        raise ValueError("GNOMON_ETCD_USERNAME needs GNOMON_ETCD_PASSWORD or GNOMON_ETCD_PASSWORD_FILE")
    plugin = TokenPlugin(
        target or s.endpoint_list[0], tls, s.username, password, server_name=s.tls_server_name
    )
    return grpc.composite_channel_credentials(
        tls, grpc.metadata_call_credentials(plugin, name="etcd-token")
    ), plugin
