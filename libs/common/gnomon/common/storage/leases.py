"""The worker's writes on a dispatched attempt: accept (QUEUED -> RUNNING) and heartbeat (lease
renewal). Both write the attempt row only (the job's RUNNING state is derived from it,
:mod:`gnomon.common.storage.job_view`). Each is compare-and-set on the attempt row: ``(job_id, attempt, token, version)`` must
match, so a stale message changes nothing. Ownership: the accept records the principal of the
accepting worker in ``attempts.owner``; every later write (heartbeat, checkpoint, result, a re-sent
accept) must come from that principal, so what a reader sees of an attempt (its id, token and version)
is not enough to write to it. ``owner`` None skips that check (in-process callers and tests only;
the dispatcher always passes the stream's principal). All instants are the database's ``now()``;
leases are ``attempts.lease_ms`` milliseconds long.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Boolean, Integer, String, Uuid, and_, bindparam, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.domain.attempts import AttemptId, AttemptKey
from gnomon.common.domain.states import AttemptState
from gnomon.common.storage import raw
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.schema import attempts
from gnomon.common.storage.statements import named

_LEASE = timedelta(milliseconds=1)
_P = unnest_rows("p", job_id=Uuid, attempt=Integer)
_KEY_COLS: dict[str, Any] = dict(job_id=Uuid, attempt=Integer, token=BigInteger)


def key_params(
    name: str,
    keys: Sequence[AttemptKey],
    *,
    with_version: bool = False,
    owners: Sequence[tuple[str | None, str | None]] | None = None,
) -> dict[str, list[Any]]:
    """Parameters of a batch of attempt keys for :func:`unnest_rows` arrays ``name`` (``job_id``,
    ``attempt``, ``token`` and, ``with_version``, ``version``; with ``owners`` (one ``(principal,
    worker_id)`` per key, principal None = unchecked), ``owner`` and ``worker``)."""
    cols: dict[str, list[Any]] = dict(
        job_id=[k.job_id for k in keys], attempt=[k.attempt for k in keys], token=[k.token for k in keys]
    )
    if with_version:
        cols["version"] = [k.version for k in keys]
    if owners is not None:
        cols["owner"] = [o[0] for o in owners]
        cols["worker"] = [o[1] for o in owners]
    return row_params(name, **cols)


_V4 = unnest_rows("v", job_id=Uuid, attempt=Integer, token=BigInteger, version=BigInteger)
_HB = unnest_rows(
    "v",
    job_id=Uuid,
    attempt=Integer,
    token=BigInteger,
    version=BigInteger,
    owner=String,
    worker=String,
    held=Boolean,
)


def owned_by(owner: Any, worker: Any) -> Any:
    """SQL: the attempt was accepted by worker ``worker`` of principal ``owner`` (columns of an
    unnested batch; a NULL owner = unchecked)."""
    return or_(owner.is_(None), and_(attempts.c.owner == owner, attempts.c.worker_id == worker))


def still_running(v: Any) -> tuple[Any, ...]:
    """SQL conditions: the attempt named by row ``v`` of an unnested batch (columns ``job_id``,
    ``attempt``, ``token``, ``version``, ``owner``, ``worker``) is still RUNNING under that fencing
    token and job version, accepted by that worker (:func:`owned_by`): the compare-and-set every
    result and failure write makes."""
    return (
        attempts.c.job_id == v.c.job_id,
        attempts.c.attempt == v.c.attempt,
        attempts.c.token == v.c.token,
        attempts.c.version == v.c.version,
        owned_by(v.c.owner, v.c.worker),
        attempts.c.state == AttemptState.RUNNING,
    )


ACCEPT = named(
    __name__,
    "ACCEPT",
    """Attempts ``(v_job_id, v_attempt, v_token, v_version)`` (arrays) still QUEUED under that token
    and version -> RUNNING for worker ``p_worker_id`` of principal ``p_owner``, ``accepted_at =
    now()``, lease restarted (``now() + lease_ms``); returns ``(job_id, attempt, lease_expires_at)``.
    The ``jobs`` row is not written: its state RUNNING is derived from this attempt
    (:mod:`gnomon.common.storage.job_view`).""",
    update(attempts)
    .where(
        attempts.c.job_id == _V4.c.job_id,
        attempts.c.attempt == _V4.c.attempt,
        attempts.c.token == _V4.c.token,
        attempts.c.version == _V4.c.version,
        attempts.c.state == AttemptState.QUEUED,
    )
    .values(
        state=AttemptState.RUNNING,
        accepted_at=func.now(),
        worker_id=bindparam("p_worker_id"),
        owner=bindparam("p_owner", type_=String),
        lease_expires_at=func.now() + attempts.c.lease_ms * _LEASE,
    )
    .returning(attempts.c.job_id, attempts.c.attempt, attempts.c.lease_expires_at),
)
ACCEPT_AGAIN = named(
    __name__,
    "ACCEPT_AGAIN",
    """The attempts ``(v_job_id, v_attempt, v_token, v_version)`` (arrays) already RUNNING for worker
    ``p_worker_id`` of principal ``p_owner`` (NULL: any) under that token and version (a re-sent
    accept) whose lease has not ended (database clock): ``(job_id, attempt, lease_expires_at)``. After
    the lease end a re-sent accept is refused: its ok would tell the worker to (re)start a handler on
    a lease that is already lost.""",
    select(attempts.c.job_id, attempts.c.attempt, attempts.c.lease_expires_at).where(
        attempts.c.job_id == _V4.c.job_id,
        attempts.c.attempt == _V4.c.attempt,
        attempts.c.token == _V4.c.token,
        attempts.c.version == _V4.c.version,
        attempts.c.state == AttemptState.RUNNING,
        attempts.c.lease_expires_at > func.now(),
        attempts.c.worker_id == bindparam("p_worker_id"),
        or_(
            bindparam("p_owner", type_=String).is_(None),
            attempts.c.owner == bindparam("p_owner", type_=String),
        ),
    ),
)


async def accept(
    conn: AsyncConnection,
    keys: list[AttemptKey],
    worker_id: str,
    owner: str | None = None,
    *,
    fresh: bool = True,
) -> dict[AttemptId, datetime]:
    """QUEUED -> RUNNING for each attempt still QUEUED under the dispatched token and version: one
    compare-and-set on the attempt row (:data:`ACCEPT`), the ``jobs`` row untouched (the job reads
    RUNNING from its attempt, :mod:`gnomon.common.storage.job_view`). The lease restarts from now
    and ``owner`` (the worker's principal) becomes the attempt's owner. Returns ``(job_id, attempt)
    -> lease end`` for the accepted ones.

    Why the attempt alone decides: a QUEUED attempt is the current attempt of a QUEUED job at the
    attempt's ``version`` (only the claim creates it; the result, the reaper and a retry act on
    RUNNING attempts only), and the one other writer that changes the job while it is QUEUED, a
    cancel, moves the attempt to CANCELLED in the same transaction after locking it
    (:func:`gnomon.common.storage.cancel.cancel_job`). So this refuses exactly what a
    compare-and-set on the job row refused.

    Idempotent: an attempt already RUNNING for the same ``worker_id`` and ``owner``
    under the same token and version counts as accepted again (a re-sent accept after a lost ack or a
    reconnect). ``fresh`` False: only that re-accept is allowed (the attempt was not delivered to
    the calling stream). Anything else (cancelled, re-dispatched, stale token, a duplicate delivery
    accepted by another worker) is refused and left unchanged."""
    if not keys:
        return {}
    out: dict[AttemptId, datetime] = {}
    if fresh:
        params = {"p_worker_id": worker_id, "p_owner": owner, **key_params("v", keys, with_version=True)}
        out = {AttemptId(r[0], r[1]): r[2] for r in await raw.fetch(conn, ACCEPT, params)}
    rest = [k for k in keys if (k.job_id, k.attempt) not in out]
    if rest:
        params = {"p_worker_id": worker_id, "p_owner": owner, **key_params("v", rest, with_version=True)}
        again = (await conn.execute(ACCEPT_AGAIN, params)).all()
        out.update({AttemptId(r[0], r[1]): r[2] for r in again})
    return out


def _live_heartbeat() -> Any:
    """SQL: the attempt of a row of the unnested heartbeat batch ``v`` is the one dispatched under
    that token and version, RUNNING and accepted by ``v_worker`` of principal ``v_owner`` (NULL:
    any), or QUEUED and ``v_held`` (delivered to the heartbeating stream)."""
    return and_(
        attempts.c.job_id == _HB.c.job_id,
        attempts.c.attempt == _HB.c.attempt,
        attempts.c.token == _HB.c.token,
        attempts.c.version == _HB.c.version,
        or_(
            and_(attempts.c.state == AttemptState.RUNNING, owned_by(_HB.c.owner, _HB.c.worker)),
            and_(attempts.c.state == AttemptState.QUEUED, _HB.c.held),
        ),
    )


HEARTBEAT = named(
    __name__,
    "HEARTBEAT",
    """Extends the lease of the live attempts ``(v_job_id, v_attempt, v_token, v_version)`` (arrays)
    to ``now() + lease_ms``: RUNNING ones accepted by worker ``v_worker`` of principal ``v_owner``
    (NULL: any), QUEUED ones only where
    ``v_held`` (delivered to the heartbeating stream); a RUNNING one only while its recorded lease has
    not ended (``lease_expires_at >= now()``: a heartbeat after the lease end renews nothing; a
    QUEUED attempt's lease is not enforced before its accept, which restarts it); returns
    ``(job_id, attempt, lease_expires_at, cancel_requested)``.""",
    update(attempts)
    .where(
        _live_heartbeat(),
        or_(attempts.c.state != AttemptState.RUNNING, attempts.c.lease_expires_at >= func.now()),
    )
    .values(lease_expires_at=func.now() + attempts.c.lease_ms * _LEASE)
    .returning(
        attempts.c.job_id, attempts.c.attempt, attempts.c.lease_expires_at, attempts.c.cancel_requested
    ),
)

EXPIRED_HEARTBEATS = named(
    __name__,
    "EXPIRED_HEARTBEATS",
    """Of the heartbeat batch ``v`` (the arrays of :data:`HEARTBEAT`), the RUNNING attempts that are
    live in every respect but whose recorded lease already ended (``lease_expires_at < now()``):
    their heartbeat is refused with ``LEASE_EXPIRED``. Returns ``(job_id, attempt)``.""",
    select(attempts.c.job_id, attempts.c.attempt).where(
        _live_heartbeat(), attempts.c.state == AttemptState.RUNNING, attempts.c.lease_expires_at < func.now()
    ),
)


async def heartbeat(
    conn: AsyncConnection,
    keys: list[AttemptKey],
    owners: Sequence[tuple[str | None, str | None]] | None = None,
    held: Sequence[bool] | None = None,
) -> dict[AttemptId, tuple[datetime, bool]]:
    """Extends the lease of every live attempt (matching token and version; RUNNING and accepted by
    its entry of ``owners``, ``(principal, worker_id)``, or QUEUED and ``held`` by the caller's
    stream; default: no owner check, every QUEUED one held), a RUNNING one only before its recorded
    lease end, by its lease duration from now; returns
    ``(job_id, attempt) -> (new lease end, cancel_requested)`` for those renewed (``cancel_requested``: a caller asked to cancel the job, see
    :func:`gnomon.common.storage.cancel.cancel_job`; the worker is told in the heartbeat ack)."""
    if not keys:
        return {}
    unchecked: list[tuple[str | None, str | None]] = [(None, None)] * len(keys)
    params = key_params("v", keys, with_version=True, owners=owners if owners is not None else unchecked)
    params["v_held"] = list(held) if held is not None else [True] * len(keys)
    rows = (await conn.execute(HEARTBEAT, params)).all()
    return {AttemptId(r[0], r[1]): (r[2], bool(r[3])) for r in rows}


async def expired_heartbeats(
    conn: AsyncConnection,
    keys: list[AttemptKey],
    owners: Sequence[tuple[str | None, str | None]] | None = None,
    held: Sequence[bool] | None = None,
) -> set[AttemptId]:
    """Of heartbeats :func:`heartbeat` did not renew (same arguments), those refused only because
    the attempt's recorded lease already ended (database clock): the worker is told ``LEASE_EXPIRED``
    (its lease is lost; the reaper declares the attempt LOST after its skew margin). The others
    (re-dispatched, finished, another worker's) are stale."""
    if not keys:
        return set()
    unchecked: list[tuple[str | None, str | None]] = [(None, None)] * len(keys)
    params = key_params("v", keys, with_version=True, owners=owners if owners is not None else unchecked)
    params["v_held"] = list(held) if held is not None else [True] * len(keys)
    return {AttemptId(r[0], r[1]) for r in (await conn.execute(EXPIRED_HEARTBEATS, params)).all()}


OWNED_ATTEMPTS = named(
    __name__,
    "OWNED_ATTEMPTS",
    """Of the attempts ``(p_job_id, p_attempt)`` (arrays), those accepted by worker ``p_worker_id`` of
    principal ``p_owner`` (any state, token or version: the write that follows checks those):
    ``(job_id, attempt)``. A read by primary key, one row per reference at most.""",
    select(attempts.c.job_id, attempts.c.attempt).where(
        attempts.c.job_id == _P.c.job_id,
        attempts.c.attempt == _P.c.attempt,
        attempts.c.owner == bindparam("p_owner", type_=String),
        attempts.c.worker_id == bindparam("p_worker_id", type_=String),
    ),
)


async def owned_attempts(
    conn: AsyncConnection, keys: Sequence[AttemptId], owner: str, worker_id: str
) -> set[AttemptId]:
    """The attempts of ``keys`` (``(job_id, attempt)``) that worker ``worker_id`` of principal
    ``owner`` accepted (the worker identity that may heartbeat, checkpoint, finish or re-accept them
    from any stream, docs/protocol.md section 7). Reads only; at most ``len(keys)`` rows."""
    if not keys:
        return set()
    params = {
        "p_owner": owner,
        "p_worker_id": worker_id,
        **row_params("p", job_id=[k[0] for k in keys], attempt=[k[1] for k in keys]),
    }
    return {AttemptId(r[0], r[1]) for r in (await conn.execute(OWNED_ATTEMPTS, params)).all()}
