"""The demo handler used by ``gnomon dev --demo``: prints the payload and sleeps a little."""

from __future__ import annotations

import time

from gnomon.sdk import JobContext


def handle(ctx: JobContext) -> None:
    """Prints the job's JSON payload with its idempotency key, then works for 0.2 s."""
    try:
        payload = ctx.json()
    except ValueError:
        payload = ctx.payload  # not JSON: show the raw bytes
    print(
        f"demo worker: running {ctx.job} attempt {ctx.attempt} payload={payload!r} "
        f"idempotency_key={ctx.idempotency_key}",
        flush=True,
    )
    time.sleep(0.2)
