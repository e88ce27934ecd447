"""Running the console: the API connection settings, the client factory that gives each session its
own key, and the HTTP(S) server (uvicorn).

The console's own credentials are only TLS trust (the CA that signed the API's certificate, an
optional client certificate for mTLS); it holds no API key of its own. Each signed-in user's calls
carry that user's key.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import uvicorn

from gnomon.sdk import AsyncClient
from gnomon.sdk.connection import Connection

from .app import create_app

__all__ = ["client_factory", "serve"]


def client_factory(base: Connection) -> Callable[[str, str], AsyncClient]:
    """``(api_key, namespace) -> AsyncClient`` reaching ``base.address`` with ``base``'s TLS settings
    and the given key (plaintext without a key when ``base.insecure``). Raises ``OSError`` when a CA
    or certificate file cannot be read (at the first call)."""

    def make(api_key: str, namespace: str) -> AsyncClient:
        if base.insecure:
            return AsyncClient(api=base.address, namespace=namespace, insecure=True)
        conn = dataclasses.replace(base, api_key=api_key, namespace=namespace)
        return AsyncClient(
            api=base.address,
            namespace=namespace,
            credentials=conn.credentials(),
            channel_options=conn.options(),
        )

    return make


def serve(
    base: Connection,
    host: str,
    port: int,
    *,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    idle_timeout: float = 8 * 3600,
    regions: list[str] | None = None,
) -> None:
    """Serves the console on ``host:port`` until SIGINT/SIGTERM: HTTPS with ``tls_cert_file`` and
    ``tls_key_file`` (then cookies are ``Secure``), else HTTP. Raises ``OSError`` if the port cannot
    be bound. ``regions``: the deployment's regions, summarized on the cluster page."""
    app = create_app(
        client_factory(base), secure_cookies=bool(tls_cert_file), idle_timeout=idle_timeout, regions=regions
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        ssl_certfile=tls_cert_file,
        ssl_keyfile=tls_key_file,
        server_header=False,
    )
    asyncio.run(uvicorn.Server(config).serve())
