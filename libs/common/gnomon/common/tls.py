"""TLS material of the servers and of service-to-service calls (``GNOMON_TLS_*``): the listeners'
credentials (:func:`server_credentials`) and those a service calls another with
(:func:`service_channel_credentials`, for hints).

Server certificates are re-read when their files change (gRPC asks for the configuration at every
new connection handshake; the files' modification times are compared), so rotating a certificate is
"replace the files"; connections already open keep the old one until they reconnect.
"""

from __future__ import annotations

import os
import threading

import grpc

from gnomon.common.auth.settings import AuthSettings, InsecureSettings, TlsSettings


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class _Reloading:
    """The fetch callback of ``grpc.dynamic_ssl_server_credentials``: a new configuration when any
    file's mtime changed, else None (keep the current one)."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.paths = [p for p in (settings.cert_file, settings.key_file, settings.client_ca_file) if p]
        self.stamp = self._stamp()
        self.lock = threading.Lock()

    def _stamp(self) -> tuple[float, ...]:
        return tuple(os.stat(p).st_mtime for p in self.paths)

    def config(self) -> grpc.ServerCertificateConfiguration:
        s = self.settings
        roots = _read(s.client_ca_file) if s.client_ca_file and s.client_auth == "require" else None
        return grpc.ssl_server_certificate_configuration([(_read(s.key_file), _read(s.cert_file))], roots)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        with self.lock:
            try:
                stamp = self._stamp()
                if stamp == self.stamp:
                    return None
                cfg = self.config()
            except OSError:
                return None  # mid-rotation: keep serving the old certificate
            self.stamp = stamp
            return cfg


def server_credentials(settings: TlsSettings | None = None) -> grpc.ServerCredentials | None:
    """Credentials for a listener: None when no certificate is configured (plaintext). Raises
    ``ValueError`` for a half configuration (cert without key, require without a client CA) and
    ``OSError`` for unreadable files."""
    s = settings or TlsSettings()
    if not s.cert_file and not s.key_file:
        return None
    if not (s.cert_file and s.key_file):
        raise ValueError("GNOMON_TLS_CERT_FILE and GNOMON_TLS_KEY_FILE must be set together")
    if s.client_auth == "require" and not s.client_ca_file:
        raise ValueError("GNOMON_TLS_CLIENT_AUTH=require needs GNOMON_TLS_CLIENT_CA_FILE")
    fetch = _Reloading(s)
    # the stubs say the callback must return a configuration; gRPC documents None as "no change"
    return grpc.dynamic_ssl_server_credentials(
        fetch.config(),
        fetch,  # type: ignore[arg-type]
        require_client_authentication=s.client_auth == "require",
    )


def service_call_parts(
    tls: TlsSettings | None = None, auth: AuthSettings | None = None, insecure: bool | None = None
) -> tuple[grpc.ChannelCredentials | None, tuple[tuple[str, str], ...]]:
    """What :func:`service_channel_credentials` gives, in two parts: the channel's TLS credentials
    (None: plaintext) and the per-call metadata carrying the service token (``authorization: Bearer``;
    empty without a token, and always empty on plaintext). Passing the token as call metadata instead
    of ``access_token_call_credentials`` spares a thread per call (gRPC runs call-credentials plugins
    on a new thread); hints are sent per create. Raises ``OSError`` for an unreadable file."""
    if insecure is None:
        insecure = InsecureSettings().insecure
    if insecure:
        return None, ()
    t, a = tls or TlsSettings(), auth or AuthSettings()
    creds = grpc.ssl_channel_credentials(_read(t.ca_file) if t.ca_file else None)
    token = ""
    if a.service_token_file:
        with open(a.service_token_file) as f:
            token = f.read().strip()
    return creds, ((("authorization", f"Bearer {token}"),) if token else ())


def service_channel_credentials(
    tls: TlsSettings | None = None, auth: AuthSettings | None = None, insecure: bool | None = None
) -> grpc.ChannelCredentials | None:
    """Credentials a service calls another Gnomon service with: None (plaintext) when ``insecure``
    (default ``GNOMON_INSECURE``); else TLS trusting ``GNOMON_TLS_CA_FILE`` (the system roots when
    empty), with the service token of ``GNOMON_AUTH_SERVICE_TOKEN_FILE`` as ``authorization: Bearer``
    call credentials when that is set. Raises ``OSError`` for an unreadable file."""
    if insecure is None:
        insecure = InsecureSettings().insecure
    if insecure:
        return None
    t, a = tls or TlsSettings(), auth or AuthSettings()
    creds = grpc.ssl_channel_credentials(_read(t.ca_file) if t.ca_file else None)
    if not a.service_token_file:
        return creds
    with open(a.service_token_file) as f:
        token = f.read().strip()
    if not token:
        return creds
    return grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
