"""The outbox (docs/concepts.md, "Vocabulary"): the durable dispatch record a claim writes in its own
transaction. The relay delivers unpublished rows (:func:`pending_outbox`, re-fenced under the current
owner's token) and marks them published once their attempt was accepted or no longer waits for a
worker (:func:`mark_published`). All instants are the database's ``now()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import timedelta

from sqlalchemy import Integer, Select, Update, Uuid, func, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.attempts import AttemptId, Claimed
from gnomon.common.domain.states import AttemptState
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.claims import ASSIGN_COLS, claimed_of
from gnomon.common.storage.fencing import check_fence
from gnomon.common.storage.schema import attempts, jobs, outbox, shard_owners
from gnomon.common.storage.statements import builder, named

_P = unnest_rows("p", job_id=Uuid, attempt=Integer)
MARK_PUBLISHED = named(
    __name__,
    "MARK_PUBLISHED",
    """Marks the unpublished outbox rows of the attempts ``(p_job_id, p_attempt)`` (arrays of job ids
    and attempt numbers) published: ``published_at = now()``, ``publish_count + 1``.""",
    update(outbox)
    .where(outbox.c.job_id == _P.c.job_id, outbox.c.attempt == _P.c.attempt, outbox.c.published_at.is_(None))
    .values(published_at=func.now(), publish_count=outbox.c.publish_count + 1),
)

_SAMPLE_ID = AttemptId(uuid.UUID(int=1), 1)


@builder(region="r", shards=[0], limit=10, min_age_s=0.0)
def pending_stmt(region: str, shards: list[int], limit: int, min_age_s: float) -> Select[tuple[object, ...]]:
    """The oldest ``limit`` unpublished outbox rows (``job_id``, ``attempt``, ``shard``, ``token``)
    of ``shards`` of ``region`` created at least ``min_age_s`` seconds ago (database clock), locked
    ``FOR UPDATE SKIP LOCKED``."""
    return (
        select(outbox.c.job_id, outbox.c.attempt, outbox.c.shard, outbox.c.token)
        .where(
            outbox.c.region == region,
            outbox.c.published_at.is_(None),
            outbox.c.shard.in_(shards),
            outbox.c.created_at <= func.now() - timedelta(seconds=min_age_s),
        )
        .order_by(outbox.c.created_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


@builder(region="r", keys=[_SAMPLE_ID])
def restamp_attempts_stmt(region: str, keys: Sequence[tuple[object, int]]) -> Update:
    """Re-stamps the attempts ``keys`` (``(job_id, attempt)`` pairs) still QUEUED with their shard's
    current token in ``region`` and restarts their lease (``now() + lease_ms``); returns ``job_id``,
    ``attempt``, ``token``, ``lease_expires_at`` of those."""
    return (
        update(attempts)
        .where(
            tuple_(attempts.c.job_id, attempts.c.attempt).in_(keys), attempts.c.state == AttemptState.QUEUED
        )
        .values(
            token=select(shard_owners.c.token)
            .where(shard_owners.c.region == region, shard_owners.c.shard == attempts.c.shard)
            .scalar_subquery(),
            lease_expires_at=func.now() + attempts.c.lease_ms * timedelta(milliseconds=1),
        )
        .returning(attempts.c.job_id, attempts.c.attempt, attempts.c.token, attempts.c.lease_expires_at)
    )


@builder(region="r", keys=[_SAMPLE_ID])
def restamp_outbox_stmt(region: str, keys: Sequence[tuple[object, int]]) -> Update:
    """Re-stamps the outbox rows ``keys`` (``(job_id, attempt)`` pairs) with their shard's current
    token in ``region``."""
    return (
        update(outbox)
        .where(tuple_(outbox.c.job_id, outbox.c.attempt).in_(keys))
        .values(
            token=select(shard_owners.c.token)
            .where(shard_owners.c.region == region, shard_owners.c.shard == outbox.c.shard)
            .scalar_subquery()
        )
    )


@builder(job_ids=[_SAMPLE_ID.job_id])
def assignments_stmt(job_ids: Sequence[object]) -> Select[tuple[object, ...]]:
    """The assignment columns (``claims.ASSIGN_COLS``) of the jobs ``job_ids``."""
    return select(*ASSIGN_COLS).where(jobs.c.id.in_(job_ids))


async def pending_outbox(
    conn: AsyncConnection,
    *,
    region: str,
    tokens: dict[int, int],
    exclude: Collection[tuple[uuid.UUID, int]],
    limit: int,
    min_age_s: float = 0.0,
) -> list[Claimed]:
    """Unpublished outbox rows of the owned shards (oldest first, at most ``limit``), re-fenced.

    Rows written under an older token (a previous owner crashed between claim commit and delivery)
    are re-stamped with the current token on the outbox and attempt rows, and their lease restarts;
    rows in ``exclude`` (``(job_id, attempt)`` being delivered by this process right now) and rows
    younger than ``min_age_s`` seconds (their claimer is probably delivering them this instant) are
    skipped. Raises :class:`StaleFencingToken` if this process no longer owns a shard involved.
    """
    if not tokens:
        return []
    q = pending_stmt(region, list(tokens), limit + len(exclude), min_age_s)
    rows = [r for r in (await conn.execute(q)).mappings() if (r["job_id"], r["attempt"]) not in exclude][
        :limit
    ]
    if not rows:
        return []
    await check_fence(conn, region, {r["shard"]: tokens[r["shard"]] for r in rows})
    keys = [AttemptId(r["job_id"], r["attempt"]) for r in rows]
    # Only attempts still waiting for a worker are re-delivered; the rest are marked published.
    live = (await conn.execute(restamp_attempts_stmt(region, keys))).mappings().all()
    dead = set(keys) - {(r["job_id"], r["attempt"]) for r in live}
    if dead:
        await mark_published(conn, list(dead))
    if not live:
        return []
    await conn.execute(restamp_outbox_stmt(region, [(r["job_id"], r["attempt"]) for r in live]))
    info = {(r["job_id"], r["attempt"]): r for r in live}
    jrows = (await conn.execute(assignments_stmt([k[0] for k in info]))).mappings().all()
    out = []
    for j in jrows:
        a = info.get((j["id"], j["attempt"]))
        if a is None:
            continue
        out.append(claimed_of(j, token=a["token"], lease_expires_at=a["lease_expires_at"]))
    return out


async def mark_published(conn: AsyncConnection, keys: Sequence[tuple[object, int]]) -> None:
    """Marks outbox rows ``(job_id, attempt)`` published (their attempt was accepted by a worker, or
    is no longer waiting for one)."""
    if keys:
        await conn.execute(
            MARK_PUBLISHED, row_params("p", job_id=[k[0] for k in keys], attempt=[k[1] for k in keys])
        )
