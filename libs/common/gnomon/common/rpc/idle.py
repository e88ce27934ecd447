"""A service process with nothing to do yet: serves gRPC health and reflection only.

A service whose engine does not exist yet can start through this, so ``gnomon dev`` runs the
final process layout from the start.
"""

from __future__ import annotations

import asyncio

from gnomon.common.config import ServerSettings
from gnomon.common.rpc.runner import configure_logging, wait_for_signal
from gnomon.common.rpc.server import GrpcServer


async def serve_idle(service: str) -> None:
    """Serves health (SERVING) and reflection on ``GNOMON_LISTEN`` until SIGTERM/SIGINT."""
    srv = ServerSettings()
    server = GrpcServer(srv.listen, [])
    await server.start()
    await server.set_serving(True)
    print(f"gnomon {service} listening on {server.address} (health only)", flush=True)
    await wait_for_signal()
    await server.stop(1.0)


def main(service: str) -> None:
    """Entry point for an idle service."""
    configure_logging(service)
    asyncio.run(serve_idle(service))
