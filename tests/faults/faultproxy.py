"""A TCP fault proxy for the fault suite (docs/faults.md): ``127.0.0.1:<port>`` -> ``upstream``.

The proxy runs its own asyncio loop in a daemon thread, so a synchronous test can switch its mode
at any moment while real processes talk through it:

* ``pass``       bytes flow both ways unchanged.
* ``delay``      every chunk is forwarded ``delay_ms`` after it was read (order kept, per direction):
                 a slow network, or a slow database as seen by one process.
* ``blackhole``  connections are accepted (new ones too) but every byte read is dropped, in both
                 directions: a partition that TCP cannot see (no RST, no FIN). Bytes dropped are
                 gone, so a stream that lived through a blackhole is usually corrupt afterwards and
                 gets closed by its protocol; that is what a real partition does to a connection
                 that outlives its timeouts too.
* ``reset``      every open connection is aborted (RST) and new ones are closed at once.

Usage::

    with FaultProxy("127.0.0.1:5432") as p:      # p.address -> "127.0.0.1:41234"
        p.set_mode("delay", delay_ms=200)
        p.set_mode("blackhole")
        p.set_mode("pass")

``p.stats`` counts connections and bytes forwarded/dropped. Also a CLI, for manual experiments::

    python tests/faults/faultproxy.py 127.0.0.1:5432 --listen 127.0.0.1:15432 --mode delay --delay-ms 100
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import threading
import time

MODES = ("pass", "delay", "blackhole", "reset")


class FaultProxy:
    """One listening socket forwarding to ``upstream`` (``host:port``) with a switchable fault mode."""

    def __init__(
        self, upstream: str, listen: str = "127.0.0.1:0", *, mode: str = "pass", delay_ms: float = 0.0
    ):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        lhost, lport = listen.rsplit(":", 1)
        self._listen = (lhost, int(lport))
        self.mode, self.delay_ms = "pass", 0.0
        self.stats: collections.Counter[str] = collections.Counter()
        self._conns: set[asyncio.WriteTransport] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.address = ""
        self.set_mode(mode, delay_ms=delay_ms)

    # -- control (any thread) ------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Binds the listening socket (``self.address``) and starts forwarding."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(10)
        return self

    def set_mode(self, mode: str, *, delay_ms: float | None = None) -> None:
        """Switches the mode for every open and future connection."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if delay_ms is not None:
            self.delay_ms = float(delay_ms)
        self.mode = mode
        self.stats[f"mode_{mode}"] += 1
        if mode == "reset" and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._abort_all(), self._loop).result(5)

    def stop(self) -> None:
        """Closes every connection and the listener, ends the thread and closes its event loop (an
        unclosed loop is a ResourceWarning, an error under -W error, in whichever test collects it)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the loop ------------------------------------------------------------------------------

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, *self._listen)
        sock = self._server.sockets[0]
        self.address = "{}:{}".format(*sock.getsockname()[:2])

    async def _abort_all(self) -> None:
        for t in list(self._conns):
            t.abort()
        self._conns.clear()

    async def _shutdown(self) -> None:
        if self._server:
            self._server.close()
        await self._abort_all()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["accepted"] += 1
        if self.mode == "reset":
            self.stats["reset_on_accept"] += 1
            writer.transport.abort()
            return
        up_writer = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.stats["upstream_connect_failed"] += 1
            writer.transport.abort()
            return
        for w in (writer, up_writer):
            self._conns.add(w.transport)
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(self._pump(reader, up_writer, "up"), self._pump(up_reader, writer, "down"))
        finally:
            for w in (writer, up_writer):
                self._conns.discard(w.transport)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        """Copies one direction; chunks go through a FIFO with a due time so that delay keeps order."""
        queue: asyncio.Queue = asyncio.Queue()

        async def sender():
            while True:
                due, data = await queue.get()
                if data is None:
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.mode == "blackhole":  # switched while the chunk waited
                    self.stats[f"dropped_{direction}"] += len(data)
                    continue
                writer.write(data)
                self.stats[f"bytes_{direction}"] += len(data)
                await writer.drain()

        task = asyncio.create_task(sender())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                mode = self.mode
                if mode == "blackhole":
                    self.stats[f"dropped_{direction}"] += len(data)
                    continue
                due = time.monotonic() + (self.delay_ms / 1000.0 if mode == "delay" else 0.0)
                queue.put_nowait((due, data))
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait((0.0, None))
            try:
                await task
            except (ConnectionError, OSError):
                pass
            try:
                writer.write_eof()
            except (OSError, RuntimeError):
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("upstream")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--mode", default="pass", choices=MODES)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    a = ap.parse_args()
    p = FaultProxy(a.upstream, a.listen, mode=a.mode, delay_ms=a.delay_ms).start()
    print(
        f"faultproxy {p.address} -> {a.upstream} mode {a.mode}; type pass|delay MS|blackhole|reset|quit",
        flush=True,
    )
    try:
        for line in iter(input, "quit"):
            parts = line.split()
            if parts:
                p.set_mode(parts[0], delay_ms=float(parts[1]) if len(parts) > 1 else None)
                print(f"mode {p.mode} delay {p.delay_ms} ms; {dict(p.stats)}", flush=True)
    except (EOFError, KeyboardInterrupt):
        pass
    p.stop()


if __name__ == "__main__":
    main()
