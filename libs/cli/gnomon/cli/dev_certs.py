"""``gnomon dev certs``: development TLS material for a deployment (deploy/README.md): a CA, a server
certificate for loopback and the names asked for, and a service token, through
:mod:`gnomon.common.devcerts`."""

from __future__ import annotations

import os

import typer


def certs(
    directory: str = typer.Argument(..., help="Where to keep the files (created 0700 if missing)."),
    san: list[str] = typer.Option(
        [],
        "--san",
        help="A name the server certificate must also carry (repeat): a DNS name such as `api` or "
        "`*.gnomon-dispatcher.gnomon.svc.cluster.local`, or an IP address.",
    ),
) -> None:
    """Make (or reuse) development TLS material for a deployment in DIRECTORY: a CA (ca.pem,
    ca-key.pem), a server certificate (server.pem, server-key.pem; 127.0.0.1, ::1, localhost and every
    --san) and a service token (service.token). What exists is kept; the server certificate is issued
    anew when the names change. Development only: use your own CA in production."""
    import secrets

    from gnomon.common import devcerts

    try:
        server = devcerts.ensure_server_cert(directory, san)
        token = os.path.join(directory, "service.token")
        if not os.path.exists(token):
            devcerts.write_secret(token, secrets.token_urlsafe(32).encode())
    except (ValueError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    for path in (os.path.join(directory, "ca.pem"), server.cert_file, server.key_file, token):
        typer.echo(path)
