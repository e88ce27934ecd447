"""Free TCP ports on the loopback address every dev server listens on."""

from __future__ import annotations

import collections
import socket
import threading

from gnomon.devservers.errors import EmbeddedServerError

__all__ = ["HOST", "free_port"]

#: Loopback address every server listens on.
HOST = "127.0.0.1"

_recent_ports: collections.deque[int] = collections.deque(maxlen=1024)
_port_lock = threading.Lock()


def free_port() -> int:
    """A TCP port (int, 1024-65535) on 127.0.0.1 that is free right now.

    The kernel picks it (bind to port 0); a port handed out by this process recently (the last
    1,024) is never handed out again, so several calls in a row give distinct ports. Another process
    can still take the port before our server binds it; the servers' ``start()`` methods retry with
    new ports when that happens. Thread-safe.

    Raises :class:`~gnomon.devservers.errors.EmbeddedServerError` if no fresh port is found after
    100 tries.
    """
    with _port_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((HOST, 0))
                port: int = s.getsockname()[1]
            if port not in _recent_ports:
                _recent_ports.append(port)
                return port
    raise EmbeddedServerError("no free TCP port found on 127.0.0.1")
