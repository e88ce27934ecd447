"""Progress checkpoints (docs/api.md#progress-checkpoints): a running attempt saves opaque bytes with its
heartbeats; the job row keeps the latest (``jobs.checkpoint``) and the claim hands it to the next
attempt in ``Assignment.checkpoint``.

A checkpoint is a compare-and-set like every worker write: it is saved only if its attempt is the
job's current attempt and still ``RUNNING`` under the same fencing token, so a lost, finished,
cancelled or re-dispatched attempt (or a stale dispatcher message) never overwrites it. The
dispatcher's write batcher applies checkpoints in the same transaction as the accepts, heartbeats
and results of its flush, after the heartbeats and before the results (so a checkpoint sent just
before a result of the same attempt, in the same flush, is saved first).

Limit: :data:`MAX_CHECKPOINT_BYTES` (64 KiB). The dispatcher refuses a larger checkpoint whole
(ack reason ``CHECKPOINT_TOO_LARGE``) before it reaches the database; a CHECK constraint backs it.
An empty checkpoint clears the saved one (stored as NULL: "no checkpoint").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import BigInteger, Integer, LargeBinary, String, Uuid, or_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.states import AttemptState
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.leases import owned_by
from gnomon.common.storage.schema import attempts, jobs
from gnomon.common.storage.statements import named

#: Largest checkpoint accepted, in bytes (64 KiB). Also enforced by ``ck_jobs_checkpoint_size``.
MAX_CHECKPOINT_BYTES = 64 * 1024


@dataclass(frozen=True)
class CheckpointWrite:
    """One checkpoint as sent by a worker: the attempt ``(job_id, attempt, token)`` and its bytes;
    ``owner``/``worker_id`` the sending principal and worker (they must have accepted the attempt;
    owner None skips the check, in-process callers)."""

    job_id: uuid.UUID
    attempt: int
    token: int
    data: bytes
    owner: str | None = None
    worker_id: str | None = None
    #: the job version the attempt was dispatched under (None: unchecked, in-process callers)
    version: int | None = None


_C = unnest_rows(
    "c",
    job_id=Uuid,
    attempt=Integer,
    token=BigInteger,
    data=LargeBinary,
    owner=String,
    worker=String,
    version=BigInteger,
)

SAVE_CHECKPOINTS = named(
    __name__,
    "SAVE_CHECKPOINTS",
    """Prebuilt: saves each row's data on its job when the attempt is current and RUNNING under the
    token and version and owned by the row's ``owner`` and ``worker`` (NULL: unchecked).""",
    update(jobs)
    .where(
        jobs.c.id == _C.c.job_id,
        jobs.c.attempt == _C.c.attempt,
        attempts.c.job_id == _C.c.job_id,
        attempts.c.attempt == _C.c.attempt,
        attempts.c.token == _C.c.token,
        owned_by(_C.c.owner, _C.c.worker),
        or_(_C.c.version.is_(None), attempts.c.version == _C.c.version),
        attempts.c.state == AttemptState.RUNNING,
    )
    .values(checkpoint=_C.c.data)
    .returning(jobs.c.id, jobs.c.attempt, attempts.c.token),
)


async def save_checkpoints(
    conn: AsyncConnection, items: list[CheckpointWrite]
) -> set[tuple[uuid.UUID, int, int]]:
    """Saves checkpoints; returns the ``(job_id, attempt, token)`` of those saved. The others were
    refused (the attempt is not the job's current RUNNING attempt under that token).

    Several checkpoints of one attempt in one call: the last one wins (callers pass them in the
    order received). Raises ``ValueError`` for data over :data:`MAX_CHECKPOINT_BYTES` (callers
    validate first; nothing is silently truncated).
    """
    latest: dict[tuple[uuid.UUID, int, int], bytes] = {}
    owner: dict[tuple[uuid.UUID, int, int], tuple[str | None, str | None, int | None]] = {}
    for it in items:
        if len(it.data) > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"checkpoint of {len(it.data)} bytes exceeds {MAX_CHECKPOINT_BYTES}")
        # UPDATE ... FROM with two source rows for one target row applies an arbitrary one: dedupe.
        latest.pop((it.job_id, it.attempt, it.token), None)
        latest[(it.job_id, it.attempt, it.token)] = it.data
        owner[(it.job_id, it.attempt, it.token)] = (it.owner, it.worker_id, it.version)
    if not latest:
        return set()
    keys = list(latest)
    rows = (
        await conn.execute(
            SAVE_CHECKPOINTS,
            row_params(
                "c",
                job_id=[k[0] for k in keys],
                attempt=[k[1] for k in keys],
                token=[k[2] for k in keys],
                data=[latest[k] or None for k in keys],
                owner=[owner[k][0] for k in keys],
                worker=[owner[k][1] for k in keys],
                version=[owner[k][2] for k in keys],
            ),
        )
    ).all()
    return {(r[0], r[1], r[2]) for r in rows}
