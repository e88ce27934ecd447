"""Named queries of the dead-letter queue (DLQ) and the audit log.

A **dead letter** is a job in state ``DEAD`` (a PERMANENT failure, retries exhausted, or a
non-idempotent job whose running attempt lost its lease; see ``dispatch.complete`` and
``reaping.reap_lost_leases``). It stays ``DEAD`` for ever (until retention prunes it); a replay
creates a **new** job (``replay_of`` = the dead job) and marks the dead job ``replayed_by`` = the new
one, so a dead letter is replayed at most once and both directions of provenance are queryable.

Replay (:func:`replay_dead_letters`) is

* **paced**: the new jobs' ``scheduled_at`` are ``1/max_rate`` seconds apart, starting at the
  database's ``now()`` (or where the previous batch of the same replay stopped), so dispatch is
  rate-limited by the due index itself, without holding the RPC open;
* **idempotent and resumable** by ``(namespace, request_id)``: a row in ``dlq_replays`` records the
  request's fingerprint, how many it takes (``target``), how many were replayed and where pacing
  stands. A repeated request returns the recorded counts; a repeat of an interrupted replay finishes
  it; the same request_id with another fingerprint is :class:`AlreadyExists`;
* **bounded**: each transaction replays at most :data:`REPLAY_BATCH` (500) jobs with one
  ``INSERT ... SELECT`` (payloads never leave the database), the match count stops at
  :data:`MAX_MATCH_COUNT`, and a replay only takes dead letters finished before it started (its own
  replays dying meanwhile are never replayed by it);
* **audited**: one ``audit_log`` row per replay or dry run, written in the replay's first transaction,
  before any job is created.

Every query has a LIMIT; all instants are the database clock.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    Insert,
    Integer,
    Select,
    Update,
    Uuid,
    and_,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert  # ON CONFLICT (rare path, not cached)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common.domain.dead_letters import DeadLetterFilter, ReplayOutcome, ReplayRequest
from gnomon.common.domain.jobs import INITIAL_ATTEMPT, INITIAL_STATE, INITIAL_VERSION, shard_of
from gnomon.common.domain.states import JobState
from gnomon.common.errors import AlreadyExists
from gnomon.common.names import job_name
from gnomon.common.quotas import Admit
from gnomon.common.storage.audit import insert_audit_entry, list_audit_entries
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.jobs import STORED_LISTED_COLUMNS as LISTED_COLUMNS
from gnomon.common.storage.predicates import state_is
from gnomon.common.storage.schema import attempts, dlq_replays, jobs
from gnomon.common.storage.statements import builder, named

#: ``matched`` counts stop here (a count is a bounded query too).
MAX_MATCH_COUNT = 100_000
#: Jobs replayed per transaction.
REPLAY_BATCH = 500
#: Names of replayed jobs kept (and returned) per replay.
MAX_JOB_NAMES = 1000
#: Attempts shown per dead letter (the most recent ones).
ATTEMPTS_SHOWN = 10

ACTION_REPLAY = "dead_letters.replay"
ACTION_REPLAY_DRY_RUN = "dead_letters.replay.dry_run"

#: Columns a replayed job copies from its dead original: what the job is and how it is to be run
#: (its per-job retry policy included, where the schema has one). Everything else is fresh: a new id
#: and shard, state SCHEDULED, version 1, attempt 0, no deadline, no request_id, no checkpoint, no
#: first-dispatch time, no error. A new per-job *setting* column belongs in this list.
REPLAY_COPY_COLUMNS = tuple(
    c
    for c in (
        "namespace",
        "region",
        "queue",
        "payload",
        "max_attempts",
        "idempotency_key",
        "lease_ms",
        "idempotent",
        "start_to_close_ms",
        "retry_initial_ms",
        "retry_max_ms",
        "retry_multiplier",
        "retry_jitter",
        "max_age_ms",
        "non_retryable_errors",
    )
    if c in jobs.c
)


def _where(f: DeadLetterFilter, *, include_replayed: bool = False) -> list[ColumnElement[bool]]:
    cond = [jobs.c.namespace == f.namespace, state_is(jobs.c.state, JobState.DEAD)]  # ix_jobs_pending_dead
    if f.queue:
        cond.append(jobs.c.queue == f.queue)
    if f.failure_class:
        cond.append(jobs.c.failure_class == f.failure_class)
    if f.error_contains:
        cond.append(jobs.c.last_error.icontains(f.error_contains, autoescape=True))
    if f.start_time is not None:
        cond.append(jobs.c.finished_at >= f.start_time)
    if f.end_time is not None:
        cond.append(jobs.c.finished_at < f.end_time)
    if not include_replayed:
        cond.append(jobs.c.replayed_by.is_(None))
    return cond


async def list_dead_letters(
    conn: AsyncConnection,
    f: DeadLetterFilter,
    *,
    include_replayed: bool,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` dead jobs matching ``f``, most recent ``finished_at`` first (ties by id
    descending), strictly after the keyset cursor ``after`` = (finished_at, id) of the previous page's
    last row. Without ``include_replayed`` only those not replayed yet. Rows are
    :data:`gnomon.common.storage.jobs.LISTED_COLUMNS` (``payload_bytes``, no payload, no
    checkpoint): the caller reads the payloads within its reply budget
    (:func:`gnomon.common.storage.jobs.budget_payloads`)."""
    q = list_dead_letters_stmt(f, include_replayed, limit, after)
    return [dict(r) for r in (await conn.execute(q)).mappings()]


_F = DeadLetterFilter("ns", "q", "PERMANENT", "boom", datetime(2026, 1, 1), datetime(2026, 1, 2))


@builder(f=_F, include_replayed=False, limit=10, after=(datetime(2026, 1, 1), uuid.UUID(int=1)))
def list_dead_letters_stmt(
    f: DeadLetterFilter, include_replayed: bool, limit: int, after: tuple[datetime, uuid.UUID] | None
) -> Select[Any]:
    """Up to ``limit`` ``jobs`` rows that are dead letters matching ``f`` (and, without
    ``include_replayed``, not replayed), newest ``finished_at`` first (ties by id descending),
    strictly after the keyset cursor ``after`` = (finished_at, id); :data:`LISTED_COLUMNS`."""
    q = select(*LISTED_COLUMNS).where(*_where(f, include_replayed=include_replayed))
    if after is not None:
        ts, last = after
        q = q.where(or_(jobs.c.finished_at < ts, and_(jobs.c.finished_at == ts, jobs.c.id < last)))
    return q.order_by(jobs.c.finished_at.desc(), jobs.c.id.desc()).limit(limit)


@builder(job_ids=[uuid.UUID(int=1)], per_job=10)
def recent_attempts_stmt(job_ids: list[uuid.UUID], per_job: int) -> Select[Any]:
    """The ``per_job`` most recent ``attempts`` rows of each of ``job_ids`` (plus their rank ``rn``),
    by job and attempt number ascending, at most ``len(job_ids) * per_job`` rows."""
    rn = (
        func.row_number().over(partition_by=attempts.c.job_id, order_by=attempts.c.attempt.desc()).label("rn")
    )
    sub = select(attempts, rn).where(attempts.c.job_id.in_(job_ids)).subquery()
    return (
        select(sub)
        .where(sub.c.rn <= per_job)
        .order_by(sub.c.job_id, sub.c.attempt)
        .limit(len(job_ids) * per_job)
    )


async def recent_attempts(
    conn: AsyncConnection, job_ids: list[uuid.UUID], per_job: int = ATTEMPTS_SHOWN
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """job id -> its ``per_job`` most recent attempt rows, oldest first (at most
    ``len(job_ids) * per_job`` rows are read)."""
    if not job_ids:
        return {}
    out: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for r in (await conn.execute(recent_attempts_stmt(job_ids, per_job))).mappings():
        out.setdefault(r["job_id"], []).append(dict(r))
    return out


async def count_matching(
    conn: AsyncConnection,
    f: DeadLetterFilter,
    *,
    finished_by: datetime | None = None,
    cap: int = MAX_MATCH_COUNT,
) -> int:
    """How many dead letters not replayed yet match ``f`` (and finished by ``finished_by``, default
    the database's ``now()``), counting at most ``cap``."""
    n: int = (await conn.execute(count_matching_stmt(f, finished_by, cap))).scalar_one()
    return n


@builder(f=_F, finished_by=None, cap=10)
def count_matching_stmt(f: DeadLetterFilter, finished_by: datetime | None, cap: int) -> Select[tuple[int]]:
    """How many dead letters not replayed match ``f`` and finished by ``finished_by`` (None: the
    database's ``now()``), counting at most ``cap``."""
    inner = (
        select(literal(1).label("one"))
        .where(*_where(f), jobs.c.finished_at <= (finished_by if finished_by is not None else func.now()))
        .limit(cap)
        .subquery()
    )
    return select(func.count()).select_from(inner)


def _outcome(row: Mapping[Any, Any], *, dry_run: bool = False) -> ReplayOutcome:
    return ReplayOutcome(
        matched=row["matched"],
        replayed=row["replayed"],
        job_names=json.loads(row["job_names"]),
        dry_run=dry_run,
        done=row["completed_at"] is not None,
    )


@builder(namespace="ns", request_id=uuid.UUID(int=1), lock=True)
def replay_row_stmt(namespace: str, request_id: uuid.UUID, lock: bool = False) -> Select[Any]:
    """The ``dlq_replays`` row of replay ``(namespace, request_id)``; ``lock``: ``FOR UPDATE``."""
    q = select(dlq_replays).where(
        dlq_replays.c.namespace == namespace, dlq_replays.c.request_id == request_id
    )
    return q.with_for_update() if lock else q


def audit_details(req: ReplayRequest, matched: int) -> dict[str, Any]:
    """The ``details`` of replay ``req``'s audit entry (filter, pacing, counts, request id)."""
    return {
        **req.audit_extra,
        "filter": req.filter.to_json(),
        "max_rate": req.max_rate,
        "max_jobs": req.max_jobs,
        "dry_run": req.dry_run,
        "matched_count": matched,
        "replay_count": min(matched, req.max_jobs),
        "request_id": str(req.request_id),
    }


async def _existing(conn: AsyncConnection, req: ReplayRequest) -> ReplayOutcome | None:
    row = (await conn.execute(replay_row_stmt(req.filter.namespace, req.request_id))).mappings().first()
    if row is None:
        return None
    if row["request_hash"] != req.request_hash:
        raise AlreadyExists(
            f"request_id {req.request_id} was already used with a different replay request",
            metadata={"request_id": str(req.request_id)},
        )
    return _outcome(row)


@builder(namespace="ns", request_id=uuid.UUID(int=1), request_hash="h", matched=2, target=1)
def insert_replay_stmt(
    namespace: str, request_id: uuid.UUID, request_hash: str, matched: int, target: int
) -> Insert:
    """Records a new replay ``(namespace, request_id)`` with its fingerprint ``request_hash``, the
    ``matched`` count and its ``target`` (0 replayed, pacing from ``now()``; complete at once when the
    target is 0); nothing if the request_id exists (``ON CONFLICT DO NOTHING``). Returns the row."""
    return (
        pg_insert(dlq_replays)
        .values(
            namespace=namespace,
            request_id=request_id,
            request_hash=request_hash,
            created_at=func.now(),
            matched=matched,
            target=target,
            replayed=0,
            next_at=func.now(),
            completed_at=func.now() if target == 0 else None,
            job_names="[]",
        )
        .on_conflict_do_nothing(index_elements=["namespace", "request_id"])
        .returning(*dlq_replays.c)
    )


async def start_replay(
    conn: AsyncConnection, req: ReplayRequest, admit: Admit | None = None
) -> ReplayOutcome:
    """The first transaction of a replay.

    A dry run counts the matching dead letters and writes its audit entry; nothing else. Otherwise,
    for a new ``request_id``: counts, records the replay in ``dlq_replays`` (``target`` =
    min(matched, max_jobs), pacing from ``now()``) and writes the audit entry, in one transaction, so
    no job is ever replayed unaudited. For a known ``request_id``: the recorded outcome (``done`` false
    if it was interrupted: :func:`replay_batch` resumes it), no new audit entry; a different
    fingerprint raises :class:`AlreadyExists` (REQUEST_ID_REUSED). ``admit(target)`` (None: no quota)
    is called before anything is written: what it raises (QuotaExceeded) rolls the transaction back,
    so a refused replay writes no job, no ``dlq_replays`` row and (here) no audit entry.
    """
    ns = req.filter.namespace
    if req.dry_run:
        matched = await count_matching(conn, req.filter)
        await insert_audit_entry(
            conn,
            namespace=ns,
            actor=req.actor,
            action=ACTION_REPLAY_DRY_RUN,
            reason=req.reason,
            request_id=req.request_id,
            details=audit_details(req, matched),
        )
        return ReplayOutcome(matched=matched, replayed=0, job_names=[], dry_run=True, done=True)
    known = await _existing(conn, req)
    if known is not None:
        return known
    matched = await count_matching(conn, req.filter)
    target = min(matched, req.max_jobs)
    if admit is not None:
        await admit(conn, target)
    stmt = insert_replay_stmt(ns, req.request_id, req.request_hash, matched, target)
    row = (await conn.execute(stmt)).mappings().first()
    if row is None:  # a concurrent call with the same request_id won the insert
        known = await _existing(conn, req)
        assert known is not None
        return known
    await insert_audit_entry(
        conn,
        namespace=ns,
        actor=req.actor,
        action=ACTION_REPLAY,
        reason=req.reason,
        request_id=req.request_id,
        details=audit_details(req, matched),
    )
    return _outcome(row)


_R = unnest_rows("r", new_id=Uuid, old_id=Uuid, shard=Integer, at=DateTime(timezone=True))
_COPY = [jobs.c[c] for c in REPLAY_COPY_COLUMNS]
INSERT_REPLAYS = named(
    __name__,
    "INSERT_REPLAYS",
    """Inserts the replay jobs of a batch: one row per (r_new_id, r_old_id, r_shard, r_at) (arrays: new
    job id, dead letter id, new shard, scheduled_at) copying the dead letter's columns (payload copied
    inside the database), state SCHEDULED, version 1, attempt 0, replay_of = the dead letter.""",
    insert(jobs).from_select(
        ["id", "shard", "scheduled_at", "state", "version", "attempt", "replay_of", *REPLAY_COPY_COLUMNS],
        select(
            _R.c.new_id,
            _R.c.shard,
            _R.c.at,
            literal(INITIAL_STATE),
            literal(INITIAL_VERSION, BigInteger),
            literal(INITIAL_ATTEMPT, Integer),
            jobs.c.id,
            *_COPY,
        ).select_from(_R.join(jobs, jobs.c.id == _R.c.old_id)),
    ),
)
_M = unnest_rows("m", new_id=Uuid, old_id=Uuid)
MARK_REPLAYED = named(
    __name__,
    "MARK_REPLAYED",
    """Marks each dead letter m_old_id (array) still DEAD and not replayed as replayed by m_new_id
    (array); returns the ids marked.""",
    update(jobs)
    .where(jobs.c.id == _M.c.old_id, jobs.c.state == JobState.DEAD, jobs.c.replayed_by.is_(None))
    .values(replayed_by=_M.c.new_id)
    .returning(jobs.c.id),
)


@builder(f=_F, created_before=datetime(2026, 1, 1), limit=10)
def pick_dead_letters_stmt(
    f: DeadLetterFilter, created_before: datetime, limit: int
) -> Select[tuple[uuid.UUID]]:
    """Ids of the oldest ``limit`` dead letters not replayed that match ``f`` and finished by
    ``created_before`` (the replay's start), locked ``FOR UPDATE SKIP LOCKED``."""
    return (
        select(jobs.c.id)
        .where(*_where(f), jobs.c.finished_at <= created_before)
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )


@builder(next_at=datetime(2026, 1, 1))
def pacing_base_stmt(next_at: datetime) -> Select[tuple[datetime]]:
    """``greatest(now(), next_at)``: where a replay batch's pacing starts (database clock)."""
    return select(func.greatest(func.now(), next_at))


@builder(namespace="ns", request_id=uuid.UUID(int=1), values={"replayed": 1})
def advance_replay_stmt(namespace: str, request_id: uuid.UUID, values: dict[str, Any]) -> Update:
    """Sets ``values`` (progress: replayed, job_names, next_at, completed_at) on replay
    ``(namespace, request_id)``; returns the row."""
    return (
        update(dlq_replays)
        .where(dlq_replays.c.namespace == namespace, dlq_replays.c.request_id == request_id)
        .values(**values)
        .returning(*dlq_replays.c)
    )


async def replay_batch(
    conn: AsyncConnection, req: ReplayRequest, *, shards: int, batch: int = REPLAY_BATCH
) -> ReplayOutcome:
    """Replays the next at most ``batch`` dead letters of a started replay, in one transaction.

    Locks the replay's ``dlq_replays`` row (concurrent repeats of one request serialize here), takes
    the oldest matching dead letters not replayed yet that finished before the replay started
    (``FOR UPDATE SKIP LOCKED``: a dead letter being replayed or pruned concurrently is left alone),
    inserts their new jobs with ``scheduled_at`` = max(now(), where pacing stopped) + k/max_rate,
    marks the originals ``replayed_by`` and advances the replay row. Marks the replay complete when it
    reached its target or found nothing more.
    """
    ns = req.filter.namespace
    rep = (await conn.execute(replay_row_stmt(ns, req.request_id, lock=True))).mappings().one()
    if rep["completed_at"] is not None:
        return _outcome(rep)
    want = min(batch, rep["target"] - rep["replayed"])
    picked = []
    if want > 0:
        picked = list(
            (await conn.execute(pick_dead_letters_stmt(req.filter, rep["created_at"], want))).scalars().all()
        )
    values: dict[str, Any] = {}
    names = json.loads(rep["job_names"])
    if picked:
        base = (await conn.execute(pacing_base_stmt(rep["next_at"]))).scalar_one()
        step_us = 1_000_000 / req.max_rate
        new_ids = [uuid.uuid4() for _ in picked]
        at = [base + timedelta(microseconds=round(k * step_us)) for k in range(len(picked))]
        await conn.execute(
            INSERT_REPLAYS,
            row_params(
                "r", new_id=new_ids, old_id=list(picked), shard=[shard_of(i, shards) for i in new_ids], at=at
            ),
        )
        marked = (
            await conn.execute(MARK_REPLAYED, row_params("m", new_id=new_ids, old_id=list(picked)))
        ).all()
        if len(marked) != len(picked):  # cannot happen under the row locks; never leave half a batch
            raise RuntimeError(f"replay batch marked {len(marked)} of {len(picked)} dead letters")
        names += [job_name(ns, i) for i in new_ids[: max(0, MAX_JOB_NAMES - len(names))]]
        values.update(
            replayed=dlq_replays.c.replayed + len(picked),
            job_names=json.dumps(names),
            next_at=base + timedelta(microseconds=round(len(picked) * step_us)),
        )
    finished = len(picked) < want or rep["replayed"] + len(picked) >= rep["target"]
    if finished:
        values["completed_at"] = func.now()
    if values:
        rep = (await conn.execute(advance_replay_stmt(ns, req.request_id, values))).mappings().one()
    return _outcome(rep)


async def replay_dead_letters(
    engine: AsyncEngine,
    req: ReplayRequest,
    *,
    shards: int,
    batch: int = REPLAY_BATCH,
    admit: Admit | None = None,
) -> ReplayOutcome:
    """Runs a whole replay: :func:`start_replay` (admitting its target with ``admit``), then
    :func:`replay_batch` transactions until done (at most ``target / batch + 1`` of them: each
    replays at least one job or completes the replay). If it fails midway, the batches committed so
    far stay replayed and the same request resumes. A replay refused in its first transaction
    (QuotaExceeded, AlreadyExists) wrote nothing (the caller audits the refusal)."""
    out = await run_transaction(engine, lambda c: start_replay(c, req, admit))
    while not out.done:
        out = await run_transaction(engine, lambda c: replay_batch(c, req, shards=shards, batch=batch))
    return out


__all__ = [
    "DeadLetterFilter",
    "ReplayRequest",
    "ReplayOutcome",
    "list_dead_letters",
    "recent_attempts",
    "count_matching",
    "start_replay",
    "replay_batch",
    "replay_dead_letters",
    "insert_audit_entry",
    "audit_details",
    "list_audit_entries",
    "MAX_MATCH_COUNT",
    "REPLAY_BATCH",
    "MAX_JOB_NAMES",
    "ATTEMPTS_SHOWN",
    "ACTION_REPLAY",
    "ACTION_REPLAY_DRY_RUN",
]
