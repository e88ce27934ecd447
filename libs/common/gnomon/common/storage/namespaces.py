"""Named queries of the namespace resource (table ``namespaces``, :mod:`gnomon.common.storage.schema_tenancy`):
create, read, list, update (compare-and-set on ``version``, the etag) and delete (refused while the
namespace has pending jobs or schedules), plus the counts quotas are checked against.

Every function takes an open :class:`AsyncConnection` inside a transaction
(:func:`gnomon.common.storage.engine.run_transaction`). Instants are the database clock, UTC-aware.
A namespace needs no row for jobs to live in it; a missing row means no job or schedule quotas and
the default worker-stream quotas (a NULL stream-quota column means the default too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Delete, Select, Update, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.dml import ReturningInsert

from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import JobState
from gnomon.common.errors import AlreadyExists, FailedPrecondition, NotFound
from gnomon.common.quotas import Quotas
from gnomon.common.storage.job_view import JOB_FROM, STATE
from gnomon.common.storage.predicates import state_in
from gnomon.common.storage.schema import jobs, schedules
from gnomon.common.storage.schema_tenancy import grants, namespaces
from gnomon.common.storage.statements import builder, named

#: The job states that count as pending (``max_pending_jobs``).
PENDING_STATES = (JobState.SCHEDULED.value, JobState.QUEUED.value)


@dataclass(frozen=True)
class NamespaceRecord:
    """One namespace row: ``name`` (the id), ``description``, ``retention_s`` (seconds finished jobs
    are kept, 0 = the cluster default), ``quotas``, ``version`` (bumped by every update; the etag is
    its decimal text) and the database instants ``created_at``/``updated_at``."""

    name: str
    description: str
    retention_s: int
    quotas: Quotas
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def etag(self) -> str:
        """The AIP-154 etag: ``str(version)``."""
        return str(self.version)

    def with_values(self, **changes: Any) -> NamespaceRecord:
        """A copy with ``changes`` applied (the fields above)."""
        return replace(self, **changes)


def _record(row: Any) -> NamespaceRecord:
    return NamespaceRecord(
        name=row.name,
        description=row.description,
        retention_s=row.retention_s,
        quotas=Quotas(
            max_create_rate=row.max_create_rate,
            max_pending_jobs=row.max_pending_jobs,
            max_schedules=row.max_schedules,
            max_worker_streams=row.max_worker_streams,
            max_queues_per_hello=row.max_queues_per_hello,
            max_worker_streams_per_principal=row.max_worker_streams_per_principal,
            max_queues_per_principal=row.max_queues_per_principal,
            max_streamed_queues=row.max_streamed_queues,
        ),
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _values(rec: NamespaceRecord) -> dict[str, Any]:
    q = rec.quotas
    return {
        "description": rec.description,
        "retention_s": rec.retention_s,
        "max_create_rate": q.max_create_rate,
        "max_pending_jobs": q.max_pending_jobs,
        "max_schedules": q.max_schedules,
        "max_worker_streams": q.max_worker_streams,
        "max_queues_per_hello": q.max_queues_per_hello,
        "max_worker_streams_per_principal": q.max_worker_streams_per_principal,
        "max_queues_per_principal": q.max_queues_per_principal,
        "max_streamed_queues": q.max_streamed_queues,
    }


def _not_found(name: str) -> NotFound:
    return NotFound(f"namespace {name!r} does not exist", reason=ErrorReason.NAMESPACE_NOT_FOUND)


NAMESPACE_BY_NAME = named(
    __name__,
    "NAMESPACE_BY_NAME",
    "The namespace row ``p_name`` (every column); no row if there is none.",
    select(namespaces).where(namespaces.c.name == bindparam("p_name")),
)

NAMESPACE_FOR_UPDATE = named(
    __name__,
    "NAMESPACE_FOR_UPDATE",
    "The namespace row ``p_name``, locked for the rest of the transaction; no row if there is none.",
    select(namespaces).where(namespaces.c.name == bindparam("p_name")).with_for_update(),
)


@builder(
    name="ns",
    values={
        "description": "",
        "retention_s": 0,
        "max_create_rate": 0.0,
        "max_pending_jobs": 0,
        "max_schedules": 0,
        "max_worker_streams": None,
        "max_queues_per_hello": None,
        "max_worker_streams_per_principal": None,
        "max_queues_per_principal": None,
        "max_streamed_queues": None,
    },
)
def insert_namespace_stmt(name: str, values: dict[str, Any]) -> ReturningInsert[Any]:
    """Creates namespace ``name`` with ``values`` (description, retention_s in seconds, the
    quotas; a None stream quota is stored NULL: the dispatcher's default) at version 1, ``created_at``/``updated_at`` = now, unless it exists; returns the new row
    (no row: it existed)."""
    stmt = pg_insert(namespaces).values(
        name=name, version=1, created_at=func.now(), updated_at=func.now(), **values
    )
    return stmt.on_conflict_do_nothing(index_elements=["name"]).returning(*namespaces.c)


@builder(after="a", limit=10, only=("a", "b"))
def list_namespaces_stmt(after: str | None, limit: int, only: Sequence[str] | None) -> Select[Any]:
    """At most ``limit`` namespace rows with ids after ``after`` (None: from the first), in id
    order; ``only`` (None: every namespace) restricts them to those ids."""
    stmt = select(namespaces).order_by(namespaces.c.name).limit(limit)
    if after is not None:
        stmt = stmt.where(namespaces.c.name > after)
    if only is not None:
        stmt = stmt.where(namespaces.c.name.in_(list(only)))
    return stmt


@builder(name="ns", version=1, values={"description": "d"})
def update_namespace_stmt(name: str, version: int, values: dict[str, Any]) -> Update:
    """Sets ``values`` (column -> value) on namespace ``name`` if it is still at ``version``
    (compare-and-set), bumps the version and ``updated_at``; returns the new row."""
    return (
        update(namespaces)
        .where(namespaces.c.name == name, namespaces.c.version == version)
        .values(version=version + 1, updated_at=func.now(), **values)
        .returning(*namespaces.c)
    )


@builder(name="ns")
def delete_namespace_stmt(name: str) -> Delete:
    """Deletes the row of namespace ``name`` (jobs, schedules and grants are not touched)."""
    return delete(namespaces).where(namespaces.c.name == name)


@builder(name="ns")
def delete_namespace_grants_stmt(name: str) -> Delete:
    """Deletes every grant in namespace ``name`` (not those in ``*``)."""
    return delete(grants).where(grants.c.namespace == name)


@builder(namespace="ns", cap=10)
def pending_jobs_stmt(namespace: str, cap: int) -> Select[Any]:
    """How many jobs of ``namespace`` are SCHEDULED or QUEUED as a client sees them (a QUEUED row whose
    attempt runs is RUNNING, not pending: :mod:`gnomon.common.storage.job_view`), counted up to
    ``cap`` (the count of a subquery limited to ``cap`` rows, so the cost is bounded by the limit
    checked against)."""
    inner = (
        select(jobs.c.id)
        .select_from(JOB_FROM)
        .where(  # ix_jobs_pending_dead
            jobs.c.namespace == namespace, state_in(jobs.c.state, PENDING_STATES), STATE.in_(PENDING_STATES)
        )
        .limit(cap)
        .subquery()
    )
    return select(func.count()).select_from(inner)


@builder(names=["a", "b"])
def pending_limits_stmt(names: list[str]) -> Select[Any]:
    """``(name, max_pending_jobs)`` of those of namespaces ``names`` that limit pending jobs, in name
    order, locked ``FOR UPDATE`` (at most ``len(names)`` rows): holders serialize per namespace, and
    the fixed order keeps two holders of several namespaces from deadlocking."""
    return (
        select(namespaces.c.name, namespaces.c.max_pending_jobs)
        .where(namespaces.c.name.in_(names), namespaces.c.max_pending_jobs > 0)
        .order_by(namespaces.c.name)
        .with_for_update()
    )


async def pending_room(conn: AsyncConnection, names: Sequence[str]) -> dict[str, int]:
    """namespace -> how many more jobs it may have pending (SCHEDULED or QUEUED, >= 0) before its
    ``max_pending_jobs``, for those of ``names`` that set that limit (a namespace absent from the
    result has no limit). Locks those namespace rows for the rest of the transaction (see
    :func:`pending_limits_stmt`), so concurrent planning transactions admit against one count each.
    Reads one row per namespace and counts up to its limit."""
    if not names:
        return {}
    limits = (await conn.execute(pending_limits_stmt(sorted(set(names))))).all()
    out: dict[str, int] = {}
    for name, limit in limits:
        out[name] = max(0, int(limit) - await count_pending_jobs(conn, name, cap=int(limit)))
    return out


@builder(namespace="ns", cap=10)
def schedule_count_stmt(namespace: str, cap: int) -> Select[Any]:
    """How many schedules ``namespace`` has, counted up to ``cap``."""
    inner = select(schedules.c.schedule_id).where(schedules.c.namespace == namespace).limit(cap).subquery()
    return select(func.count()).select_from(inner)


async def get_namespace(conn: AsyncConnection, name: str) -> NamespaceRecord:
    """The namespace ``name``. Raises :class:`NotFound` (NAMESPACE_NOT_FOUND)."""
    row = (await conn.execute(NAMESPACE_BY_NAME, {"p_name": name})).first()
    if row is None:
        raise _not_found(name)
    return _record(row)


async def find_quotas(conn: AsyncConnection, name: str) -> Quotas | None:
    """The quotas of namespace ``name``; None if it has no row (no limits)."""
    row = (await conn.execute(NAMESPACE_BY_NAME, {"p_name": name})).first()
    return None if row is None else _record(row).quotas


async def create_namespace(conn: AsyncConnection, rec: NamespaceRecord) -> NamespaceRecord:
    """Inserts ``rec`` (its ``version`` and instants are set by the database); returns the stored
    record. Raises :class:`AlreadyExists` (NAMESPACE_EXISTS) when the id is taken."""
    row = (await conn.execute(insert_namespace_stmt(rec.name, _values(rec)))).first()
    if row is None:
        raise AlreadyExists(f"namespace {rec.name!r} already exists", reason=ErrorReason.NAMESPACE_EXISTS)
    return _record(row)


async def list_namespaces(
    conn: AsyncConnection, *, after: str | None, limit: int, only: Sequence[str] | None = None
) -> list[NamespaceRecord]:
    """At most ``limit`` namespaces after id ``after`` in id order, only those in ``only`` if given."""
    rows = (await conn.execute(list_namespaces_stmt(after, limit, only))).all()
    return [_record(r) for r in rows]


def check_etag(rec: NamespaceRecord, etag: str) -> None:
    """Raises :class:`FailedPrecondition` (STALE_VERSION, metadata ``etag``) when ``etag`` is
    non-empty and is not ``rec``'s."""
    if etag and etag != rec.etag:
        raise FailedPrecondition(
            f"namespace {rec.name!r} is at etag {rec.etag}, not {etag}; nothing was changed",
            reason=ErrorReason.STALE_VERSION,
            metadata={"etag": rec.etag},
        )


async def update_namespace(conn: AsyncConnection, rec: NamespaceRecord, etag: str) -> NamespaceRecord:
    """Writes ``rec``'s description, retention and quotas over the stored namespace ``rec.name``
    when ``etag`` is empty or current. Raises :class:`NotFound` (NAMESPACE_NOT_FOUND) or
    :class:`FailedPrecondition` (STALE_VERSION)."""
    row = (await conn.execute(NAMESPACE_FOR_UPDATE, {"p_name": rec.name})).first()
    if row is None:
        raise _not_found(rec.name)
    current = _record(row)
    check_etag(current, etag)
    new = (await conn.execute(update_namespace_stmt(rec.name, current.version, _values(rec)))).first()
    assert new is not None  # the row is locked at that version
    return _record(new)


async def delete_namespace(conn: AsyncConnection, name: str, etag: str) -> None:
    """Deletes namespace ``name``'s row and every grant in it (so a namespace created later with the
    same id starts with no principals). Raises :class:`NotFound` (NAMESPACE_NOT_FOUND),
    :class:`FailedPrecondition` (STALE_VERSION for a stale ``etag``; NAMESPACE_NOT_EMPTY while it has
    a SCHEDULED or QUEUED job or any schedule)."""
    row = (await conn.execute(NAMESPACE_FOR_UPDATE, {"p_name": name})).first()
    if row is None:
        raise _not_found(name)
    check_etag(_record(row), etag)
    pending = await count_pending_jobs(conn, name, cap=1)
    sched = await count_schedules(conn, name, cap=1)
    if pending or sched:
        raise FailedPrecondition(
            f"namespace {name!r} still has pending jobs or schedules; delete or finish them first",
            reason=ErrorReason.NAMESPACE_NOT_EMPTY,
            metadata={"pending_jobs": str(pending), "schedules": str(sched)},
        )
    await conn.execute(delete_namespace_grants_stmt(name))
    await conn.execute(delete_namespace_stmt(name))


async def count_pending_jobs(conn: AsyncConnection, namespace: str, *, cap: int) -> int:
    """Jobs of ``namespace`` SCHEDULED or QUEUED, counted up to ``cap`` (>= 1)."""
    return int((await conn.execute(pending_jobs_stmt(namespace, cap))).scalar_one())


async def count_schedules(conn: AsyncConnection, namespace: str, *, cap: int) -> int:
    """Schedules of ``namespace``, counted up to ``cap`` (>= 1)."""
    return int((await conn.execute(schedule_count_stmt(namespace, cap))).scalar_one())


def quotas_loader(engine: AsyncEngine) -> Callable[[str], Awaitable[Quotas | None]]:
    """A loader for :class:`gnomon.common.quotas.NamespaceCache`: reads a namespace's quotas in its
    own transaction on ``engine`` (None: no row)."""
    from gnomon.common.storage.engine import run_transaction

    async def load(namespace: str) -> Quotas | None:
        return await run_transaction(engine, lambda c: find_quotas(c, namespace))

    return load
