"""``gnomon health``: asks a Gnomon server's ``grpc.health.v1.Health/Check`` (open without a
credential), over TLS with the CA of the client settings (``GNOMON_TLS_CA_FILE`` or the profile).
Made for container health checks and Kubernetes exec probes: Kubernetes' own gRPC probe speaks
plaintext only, and every Gnomon listener serves TLS."""

from __future__ import annotations

import dataclasses
import os

import grpc
import typer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gnomon.sdk.connection import resolve


def health(
    address: str = typer.Option(
        "127.0.0.1:7070", "--address", help="host:port of the server (default: this host's 7070)."
    ),
    service: str = typer.Option(
        "", "--service", help="A service name, e.g. gnomon.v1.JobService (default: the server overall)."
    ),
    timeout_s: float = typer.Option(2.0, "--timeout", min=0.1, help="Deadline of the check, seconds."),
) -> None:
    """Exit 0 when the server at --address answers SERVING, else print its status (or the error) and
    exit 1 (2 for unusable client settings). Sends no API key, whatever the environment or profile
    names; TLS as the client settings say (GNOMON_TLS_CA_FILE, GNOMON_TLS_SERVER_NAME, GNOMON_INSECURE)."""
    # no credential: health is open, and a key file the container does not mount must not matter
    environ = {k: v for k, v in os.environ.items() if k not in ("GNOMON_API_KEY", "GNOMON_API_KEY_FILE")}
    try:
        conn = dataclasses.replace(resolve(address, environ=environ), api_key=None)
    except (OSError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        with conn.channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
    except grpc.RpcError as e:
        typer.echo(f"{address}: {e.code().name}: {e.details()}", err=True)
        raise typer.Exit(1) from None
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    typer.echo(f"{address}: {status}")
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        raise typer.Exit(1)
