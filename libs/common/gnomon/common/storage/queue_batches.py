"""Queue-health reads of many queues in one statement each (lateral joins over a target array), for
loops that visit every served queue: the circuit breaker's evaluation reads (and creates, for new
queues) the ``queue_state`` rows and failure statistics of all its queues in a few statements,
whatever their number (one tenant's
thousands of queues must not make another's evaluation or claims slow).

Same semantics as the one-queue reads of :mod:`gnomon.common.storage.queues`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, Integer, Interval, String, and_, bindparam, case, func, literal, select, true
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.queues import _COUNTED, _FAILED, CLOSED, MAX_COUNTED
from gnomon.common.storage.schema import attempts, queue_state
from gnomon.common.storage.statements import named

Target = tuple[str, str]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REGION = bindparam("p_region", type_=String)

_T = unnest_rows("t", namespace=String, queue=String)
GET_STATES = named(
    __name__,
    "GET_STATES",
    """The ``queue_state`` rows of region ``p_region`` of the targets ``(t_namespace, t_queue)`` (two
    text arrays) that have one (primary-key lookups).""",
    select(queue_state).select_from(
        _T.join(
            queue_state,
            and_(
                queue_state.c.region == _REGION,
                queue_state.c.namespace == _T.c.namespace,
                queue_state.c.queue == _T.c.queue,
            ),
        )
    ),
)

_N = unnest_rows("n", namespace=String, queue=String)
INSERT_STATES = named(
    __name__,
    "INSERT_STATES",
    """Creates the missing ``queue_state`` rows of region ``p_region`` of the targets ``(n_namespace,
    n_queue)`` (two text arrays): CLOSED, version 1, ``updated_at = now()``; nothing for one that exists.""",
    pg_insert(queue_state)
    .from_select(
        ["region", "namespace", "queue", "state", "version", "updated_at"],
        select(_REGION, _N.c.namespace, _N.c.queue, literal(CLOSED, String), literal(1, Integer), func.now()),
    )
    .on_conflict_do_nothing(index_elements=["region", "namespace", "queue"]),
)


_F = unnest_rows("f", ord=Integer, namespace=String, queue=String, since=DateTime(timezone=True))
_fin = (
    select(_COUNTED.label("counted"), _FAILED.label("failed"))
    .where(
        attempts.c.region == _REGION,
        attempts.c.namespace == _F.c.namespace,
        attempts.c.queue == _F.c.queue,
        attempts.c.finished_at
        >= func.greatest(func.now() - bindparam("p_window", type_=Interval), _F.c.since),
    )
    .order_by(attempts.c.finished_at.desc())
    .limit(bindparam("p_cap", type_=Integer))
    .lateral("fin")
)
FAILURE_STATS_MANY = named(
    __name__,
    "FAILURE_STATS_MANY",
    """``FAILURE_STATS`` of many queues: per row ``(f_ord, f_namespace, f_queue, f_since)`` (four
    arrays) of region ``p_region``, ``(f_ord, results, failures)`` of its attempts finished since
    max(now() - ``p_window``, since), newest first, at most ``p_cap`` rows per queue.""",
    select(
        _F.c.ord,
        func.coalesce(func.sum(case((_fin.c.counted, 1), else_=0)), 0),
        func.coalesce(func.sum(case((_fin.c.failed, 1), else_=0)), 0),
    )
    .select_from(_F.outerjoin(_fin, true()))
    .group_by(_F.c.ord),
)


async def get_states(
    conn: AsyncConnection, *, region: str, targets: list[Target]
) -> dict[Target, dict[str, Any]]:
    """The ``queue_state`` rows of ``targets`` that have one (a missing row: never evaluated, CLOSED)."""
    if not targets:
        return {}
    rows = await conn.execute(
        GET_STATES,
        {
            "p_region": region,
            **row_params("t", namespace=[n for n, _ in targets], queue=[q for _, q in targets]),
        },
    )
    return {(r["namespace"], r["queue"]): dict(r) for r in rows.mappings()}


async def ensure_states(
    conn: AsyncConnection, *, region: str, targets: list[Target]
) -> dict[Target, dict[str, Any]]:
    """The ``queue_state`` rows of ``targets``, the missing ones created CLOSED (version 1) first:
    at most three statements whatever the number of targets (one when none is missing)."""
    rows = await get_states(conn, region=region, targets=targets)
    missing = [t for t in targets if t not in rows]
    if missing:
        await conn.execute(
            INSERT_STATES,
            {
                "p_region": region,
                **row_params("n", namespace=[n for n, _ in missing], queue=[q for _, q in missing]),
            },
        )
        rows.update(await get_states(conn, region=region, targets=missing))
    return rows


async def failure_stats_many(
    conn: AsyncConnection,
    *,
    region: str,
    since: dict[Target, datetime | None],
    window_s: float,
    cap: int = MAX_COUNTED,
) -> dict[Target, tuple[int, int]]:
    """``(results, failures)`` per target of ``since`` (target -> not before this instant, None: the
    window only), as :func:`gnomon.common.storage.queues.failure_stats` computes them, in one statement."""
    if not since:
        return {}
    keys = list(since)
    rows = await conn.execute(
        FAILURE_STATS_MANY,
        {
            "p_region": region,
            "p_window": timedelta(seconds=window_s),
            "p_cap": cap,
            **row_params(
                "f",
                ord=list(range(len(keys))),
                namespace=[n for n, _ in keys],
                queue=[q for _, q in keys],
                since=[since[k] or _EPOCH for k in keys],
            ),
        },
    )
    return {keys[i]: (int(total), int(failed)) for i, total, failed in rows}
