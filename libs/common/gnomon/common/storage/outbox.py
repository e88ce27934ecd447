"""The outbox (docs/concepts.md, "Vocabulary"): the durable dispatch record a claim writes in its own
transaction is the **attempt row** itself while it is ``QUEUED`` (claimed, not yet accepted by a
worker). There is no separate outbox table (migration 0013 dropped it: it duplicated the attempt row
with one more insert and one more update per job). The relay delivers QUEUED attempts that no live
stream holds (:func:`pending_outbox`, re-fenced under the current owner's token); an attempt leaves
the outbox when it leaves QUEUED (accepted, cancelled, or its job re-dispatched). All instants are the
database's ``now()``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import timedelta

from sqlalchemy import Select, Update, func, select, tuple_, update

from gnomon.common.domain.attempts import AttemptId, Claimed
from gnomon.common.domain.states import AttemptState
from gnomon.common.storage.claims import ASSIGN_COLS, claimed_of
from gnomon.common.storage.fencing import Fenced
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.schema import attempts, jobs, shard_owners
from gnomon.common.storage.statements import builder

_SAMPLE_ID = AttemptId(uuid.UUID(int=1), 1)


@builder(region="r", shards=[0], limit=10, min_age_s=0.0)
def pending_stmt(region: str, shards: list[int], limit: int, min_age_s: float) -> Select[tuple[object, ...]]:
    """The oldest ``limit`` QUEUED attempts (``job_id``, ``attempt``, ``shard``, ``token``) of
    ``shards`` of ``region`` claimed at least ``min_age_s`` seconds ago (database clock), locked
    ``FOR UPDATE SKIP LOCKED``; served by the partial index ``ix_attempts_open``."""
    return (
        select(attempts.c.job_id, attempts.c.attempt, attempts.c.shard, attempts.c.token)
        .where(
            attempts.c.region == region,
            attempts.c.finished_at.is_(None),  # the predicate of ix_attempts_open
            state_is(attempts.c.state, AttemptState.QUEUED),
            attempts.c.shard.in_(shards),
            attempts.c.claimed_at <= func.now() - timedelta(seconds=min_age_s),
        )
        .order_by(attempts.c.claimed_at)
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


@builder(job_ids=[_SAMPLE_ID.job_id])
def assignments_stmt(job_ids: Sequence[object]) -> Select[tuple[object, ...]]:
    """The assignment columns (``claims.ASSIGN_COLS``) of the jobs ``job_ids``."""
    return select(*ASSIGN_COLS).where(jobs.c.id.in_(job_ids))


async def pending_outbox(
    fx: Fenced,
    *,
    exclude: Collection[tuple[uuid.UUID, int]],
    limit: int,
    min_age_s: float = 0.0,
) -> list[Claimed]:
    """QUEUED attempts of the shards of the fenced transaction ``fx`` (:func:`run_fenced`; oldest
    first, at most ``limit``), re-fenced: the outbox.

    Every one is re-stamped with its shard's current token (a previous owner may have crashed
    between claim commit and delivery) and its lease restarts; the shards re-stamped are touched, so
    their fence is checked before the commit;
    rows in ``exclude`` (``(job_id, attempt)`` being delivered by this process right now) and rows
    younger than ``min_age_s`` seconds (their claimer is probably delivering them this instant) are
    skipped. :func:`run_fenced` raises :class:`StaleFencingToken` if this process no longer owns a
    shard involved.
    """
    conn, region, tokens = fx.conn, fx.region, fx.tokens
    if not tokens:
        return []
    q = pending_stmt(region, list(tokens), limit + len(exclude), min_age_s)
    rows = [r for r in (await conn.execute(q)).mappings() if (r["job_id"], r["attempt"]) not in exclude][
        :limit
    ]
    if not rows:
        return []
    fx.touch({r["shard"] for r in rows})
    keys = [AttemptId(r["job_id"], r["attempt"]) for r in rows]
    live = (await conn.execute(restamp_attempts_stmt(region, keys))).mappings().all()
    if not live:
        return []
    info = {(r["job_id"], r["attempt"]): r for r in live}
    jrows = (await conn.execute(assignments_stmt([k[0] for k in info]))).mappings().all()
    out = []
    for j in jrows:
        a = info.get((j["id"], j["attempt"]))
        if a is None:
            continue
        out.append(claimed_of(j, token=a["token"], lease_expires_at=a["lease_expires_at"]))
    return out
