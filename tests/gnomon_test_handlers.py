"""Handlers run by worker processes in the end-to-end tests (imported as ``gnomon_test_handlers``
with ``tests/`` on PYTHONPATH). Each execution appends one line to ``$GNOMON_TEST_RECORD``:
``<job name> <attempt> <idempotency key> <fencing token> <wall clock unix seconds> <worker pid>``.
"""
from __future__ import annotations

import os
import time


def record(ctx) -> None:
    """Records the execution (one O_APPEND write, atomic across processes for short lines)."""
    line = f"{ctx.job} {ctx.attempt} {ctx.idempotency_key} {ctx.fencing_token} {time.time():.6f} {os.getpid()}\n"
    fd = os.open(os.environ["GNOMON_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def noop(ctx) -> None:
    """Does nothing (benchmarks)."""


def hang_on_first_attempt(ctx) -> None:
    """Attempt 1 hangs (until its worker is killed); later attempts record and return."""
    if ctx.attempt == 1:
        time.sleep(3600)
    record(ctx)
