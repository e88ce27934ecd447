"""The Python SDK's conformance driver: a worker of ``gnomon.sdk`` that obeys the command contract of
``tests/conformance/README.md`` (each job's payload says what its handler does; every step is appended
to the events file as one JSON line).

Run by the conformance harness as ``python tests/conformance/drivers/python_worker.py`` with:

* ``GNOMON_API``, ``GNOMON_NAMESPACE``, ``GNOMON_TLS_CA_FILE``, ``GNOMON_API_KEY`` (or
  ``GNOMON_INSECURE=true``), ``GNOMON_TLS_SERVER_NAME``: where the suite is and how to reach it, read
  by the SDK itself (:mod:`gnomon.sdk.connection`);
* ``CONFORMANCE_QUEUE`` (required), ``CONFORMANCE_CONCURRENCY`` (handler slots, default 4),
  ``CONFORMANCE_EVENTS`` (required: the JSON-lines file events are appended to).

SIGTERM (or SIGINT) starts the SDK's graceful drain (:meth:`gnomon.sdk.Worker.stop`): no new work,
unstarted attempts released, running handlers finished; the process then exits 0. Only the public
SDK API is used, so this file is also an example of a worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from gnomon.sdk import (
    AmbiguousError,
    Cancelled,
    JobContext,
    PermanentError,
    ThrottledError,
    TransientError,
    Worker,
    classify_exception,
)

#: The driver's exit code for ``{"do": "exit"}`` (what a shell reports for a SIGKILLed process).
EXIT_CODE = 137

#: ``JobContext.cancel_reason`` -> the contract's ``reason`` of a ``cancelled`` event.
_REASONS = {"cancel_requested": "cancel", "lease_lost": "lease_lost", "refused": "lease_lost"}


class Events:
    """Appends one JSON object per line to the events file: one ``write`` of the whole line to a
    descriptor opened ``O_APPEND`` (so lines of several drivers never interleave), no buffering."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, event: str, ctx: JobContext | None = None, **fields: Any) -> None:
        """Writes ``{"event", "job", "attempt", "pid", "t", **fields}`` (``t``: unix seconds)."""
        record = {
            "event": event,
            "job": ctx.job if ctx else "",
            "attempt": ctx.attempt if ctx else 0,
            "pid": os.getpid(),
            "t": time.time(),
            **fields,
        }
        os.write(self.fd, (json.dumps(record) + "\n").encode())


def _failure(command: dict[str, Any]) -> Exception:
    """The exception that makes the SDK report the failure class ``command["class"]``."""
    cls, message = command.get("class"), str(command.get("message") or "conformance failure")
    if cls == "transient":
        return TransientError(message)
    if cls == "permanent":
        return PermanentError(message)
    if cls == "throttled":
        return ThrottledError(float(command.get("retry_after_s", 0)), message)
    if cls == "ambiguous":
        return AmbiguousError(message)
    return PermanentError(f"unknown failure class {cls!r}")


class Driver:
    """The handler of every attempt (one instance per process)."""

    def __init__(self, events: Events) -> None:
        self.events = events

    async def handle(self, ctx: JobContext) -> None:
        """Runs the payload's command, emitting ``start`` first and ``finish`` (or ``cancelled``
        then ``finish``) at the end; see the README for each command."""
        last = ctx.last_checkpoint
        self.events.emit(
            "start",
            ctx,
            fencing_token=ctx.fencing_token,
            idempotency_key=ctx.idempotency_key,
            last_checkpoint=last.decode("utf-8", "replace") if last is not None else None,
        )
        try:
            await self._run(ctx, ctx.json())
        except BaseException as exc:
            failure = classify_exception(exc)
            self.events.emit("finish", ctx, outcome="failed", **{"class": failure.failure_class.name.lower()})
            raise
        self.events.emit("finish", ctx, outcome="succeeded", **{"class": None})

    async def _run(self, ctx: JobContext, command: dict[str, Any]) -> None:
        do = command.get("do")
        if do == "succeed":
            return
        if do == "fail":
            raise _failure(command)
        if do == "sleep":
            await self._wait(ctx, float(command["s"]))
            return
        if do == "block":
            if ctx.attempt == 1:
                time.sleep(float(command["s"]))  # noqa: ASYNC251 -- blocks the loop on purpose: no heartbeats
            return
        if do == "checkpoint":
            if ctx.last_checkpoint is None:
                await self._checkpoint(ctx, str(command["data"]).encode())
                raise TransientError("checkpoint saved; failing to resume on the next attempt")
            return
        if do == "wait_cancel":
            await self._wait(ctx, float(command.get("timeout_s", 30)))
            return
        if do == "exit":
            if ctx.attempt == 1:
                os._exit(EXIT_CODE)
            return
        raise PermanentError(f"unknown command {do!r}")

    async def _wait(self, ctx: JobContext, seconds: float) -> None:
        """Awaits ``seconds`` (heartbeats go on); a cancellation cuts it short: ``cancelled`` is
        emitted and :class:`Cancelled` raised, which the SDK reports as the documented end of a
        cancelled handler (PERMANENT for a cancel request, nothing for a lost lease)."""
        if await ctx.wait_cancelled(seconds):
            reason = ctx.cancel_reason or ""
            self.events.emit("cancelled", ctx, reason=_REASONS.get(reason, reason))
            raise Cancelled(ctx.cancel_reason)

    async def _checkpoint(self, ctx: JobContext, data: bytes) -> None:
        """Saves ``data`` and waits until the dispatcher acknowledged it as saved."""
        ctx.checkpoint(data)
        if not await ctx.wait_checkpoint_saved(timeout=30):
            raise TransientError("checkpoint not acknowledged within 30 s")
        self.events.emit("checkpointed", ctx)


async def main() -> int:
    """Runs the worker until SIGTERM/SIGINT, then drains; returns the exit code (0)."""
    queue = os.environ["CONFORMANCE_QUEUE"]
    concurrency = int(os.environ.get("CONFORMANCE_CONCURRENCY") or 4)
    events = Events(os.environ["CONFORMANCE_EVENTS"])
    worker = Worker([queue], Driver(events).handle, concurrency=concurrency)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    run = loop.create_task(worker.run_async())
    if await worker.wait_connected(timeout=30):
        events.emit("ready")
    await run
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
