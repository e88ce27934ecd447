"""Handlers run by worker processes in the end-to-end tests (imported as ``gnomon_test_handlers``
with ``tests/`` on PYTHONPATH). Each execution appends one line to ``$GNOMON_TEST_RECORD``:
``<job name> <attempt> <idempotency key> <fencing token> <wall clock unix seconds> <worker pid>``.
"""

from __future__ import annotations

import asyncio
import os
import time


def record(ctx) -> None:
    """Records the execution (one O_APPEND write, atomic across processes for short lines)."""
    line = (
        f"{ctx.job} {ctx.attempt} {ctx.idempotency_key} {ctx.fencing_token} {time.time():.6f} {os.getpid()}\n"
    )
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


async def wait_for_cancel(ctx) -> None:
    """Runs until the job's cancellation reaches it (``ctx.cancelled``), then raises
    :class:`gnomon.sdk.Cancelled` (reported as a PERMANENT failure)."""
    from gnomon.sdk import Cancelled

    while not ctx.cancelled:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    raise Cancelled(ctx.cancel_reason)


def fail_while_file(ctx) -> None:
    """Records the execution, then raises :class:`gnomon.sdk.TransientError` while the file named by
    ``$GNOMON_TEST_FAIL_FILE`` exists (a dependency that is down until the test removes it)."""
    from gnomon.sdk import TransientError

    record(ctx)
    if os.path.exists(os.environ["GNOMON_TEST_FAIL_FILE"]):
        raise TransientError("dependency down")


def permanent_failure(ctx) -> None:
    """Records the execution and fails PERMANENT."""
    from gnomon.sdk import PermanentError

    record(ctx)
    raise PermanentError("bad input")


def value_error(ctx) -> None:
    """Records the execution and raises ValueError (TRANSIENT by class; a retry policy may name it)."""
    record(ctx)
    raise ValueError("invalid literal")


def throttle_first_attempt(ctx) -> None:
    """Records the execution; attempt 1 fails THROTTLED with retry_after 2 s, later attempts succeed."""
    from gnomon.sdk import ThrottledError

    record(ctx)
    if ctx.attempt == 1:
        raise ThrottledError(2.0, "rate limited")


def record_occurrence(ctx) -> None:
    """Records ``<job name> <schedule> <nominal_time ISO> <coalesced_count>`` (schedule occurrences)."""
    nominal = ctx.nominal_time.isoformat() if ctx.nominal_time else "-"
    line = f"{ctx.job} {ctx.schedule or '-'} {nominal} {ctx.coalesced_count}\n"
    fd = os.open(os.environ["GNOMON_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def record_then_sleep(ctx) -> None:
    """Records the execution, then runs ``$GNOMON_TEST_SLEEP_S`` seconds (renewing its lease meanwhile)."""
    record(ctx)
    time.sleep(float(os.environ.get("GNOMON_TEST_SLEEP_S", "1")))
