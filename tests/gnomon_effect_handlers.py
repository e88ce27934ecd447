"""Handlers for the idempotency and long-job tests, run by real ``gnomon worker`` processes (imported
as ``gnomon_effect_handlers`` with the repository root and ``tests/`` on PYTHONPATH).

* ``*_then_crash``: the examples' handlers (examples/), after which attempt 1 kills its worker
  process with ``os._exit(1)`` before the result can be reported: the effect is done, the scheduler
  never hears of it (a crash after the effect, i.e. a lost ACK).
* ``long_steps``: a long job that sleeps in small steps, saves a progress checkpoint after each step
  and resumes from ``ctx.last_checkpoint``; records what it saw in ``$GNOMON_TEST_RECORD``.
"""

from __future__ import annotations

import json
import os
import time

from examples import external_api_effect, local_db_effect


def _crash_on_first_attempt(ctx) -> None:
    if ctx.attempt == 1:
        os._exit(1)  # no result, no release, no goodbye: the lease just stops being renewed


def local_db_then_crash(ctx) -> None:
    local_db_effect.handle(ctx)
    _crash_on_first_attempt(ctx)


def external_api_then_crash(ctx) -> None:
    external_api_effect.handle(ctx)
    _crash_on_first_attempt(ctx)


def _record(line: str) -> None:
    fd = os.open(os.environ["GNOMON_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def long_steps(ctx) -> None:
    """Payload ``{"steps": N, "step_s": S}``: N steps of S seconds (slept in 50 ms slices, checking
    for cancellation), a checkpoint ``{"done": i}`` after each. Records
    ``start <job> <attempt> <pid> <checkpoint or ->``, ``step <job> <attempt> <i>``, then
    ``done <job> <attempt>`` or ``cancelled <job> <attempt> <reason>``."""
    p = ctx.json()
    first = json.loads(ctx.last_checkpoint)["done"] if ctx.last_checkpoint else 0
    _record(f"start {ctx.job} {ctx.attempt} {os.getpid()} {first if ctx.last_checkpoint else '-'}")
    try:
        for i in range(first + 1, p["steps"] + 1):
            end = time.monotonic() + p["step_s"]
            while time.monotonic() < end:
                ctx.raise_if_cancelled()
                time.sleep(0.05)
            ctx.checkpoint(json.dumps({"done": i}).encode())  # also raises Cancelled if cancelled
            _record(f"step {ctx.job} {ctx.attempt} {i}")
    except BaseException:
        _record(f"cancelled {ctx.job} {ctx.attempt} {ctx.cancel_reason}")
        raise
    _record(f"done {ctx.job} {ctx.attempt}")
