"""Named queries of identity: principals, their API keys (hashed) and grants (tables in
:mod:`gnomon.common.storage.schema_tenancy`). The authenticator reads them (:func:`load_key`,
:func:`load_principal`); ``gnomon auth`` and the admin RPCs write them. Instants are the database clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, Select, Update, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningDelete

from gnomon.common.auth.keys import ApiKey
from gnomon.common.auth.principals import Grant, Role, grants_from
from gnomon.common.storage.schema_tenancy import api_keys, grants, principals
from gnomon.common.storage.statements import builder, named

KEY_BY_ID = named(
    __name__,
    "KEY_BY_ID",
    """The API key ``p_id`` with its principal's ``disabled_at``: (principal, secret_sha256,
    expires_at, revoked_at, disabled_at, now); no row if the key or its principal does not exist.""",
    select(
        api_keys.c.principal,
        api_keys.c.secret_sha256,
        api_keys.c.expires_at,
        api_keys.c.revoked_at,
        principals.c.disabled_at,
        func.now().label("now"),
    )
    .select_from(api_keys.join(principals, principals.c.name == api_keys.c.principal))
    .where(api_keys.c.id == bindparam("p_id")),
)

PRINCIPAL_BY_NAME = named(
    __name__,
    "PRINCIPAL_BY_NAME",
    "The principal ``p_name``: (name, description, created_at, disabled_at); no row if unknown.",
    select(principals).where(principals.c.name == bindparam("p_name")),
)

GRANTS_OF = named(
    __name__,
    "GRANTS_OF",
    "Every grant of principal ``p_principal``: (namespace, role, queues JSON).",
    select(grants.c.namespace, grants.c.role, grants.c.queues).where(
        grants.c.principal == bindparam("p_principal")
    ),
)


@dataclass(frozen=True)
class KeyRecord:
    """A stored key as the authenticator needs it: ``principal``, ``secret_sha256`` and whether it
    may be used now (``usable``: not revoked, not expired, principal not disabled)."""

    principal: str
    secret_sha256: str
    usable: bool


async def load_key(conn: AsyncConnection, key_id: str) -> KeyRecord | None:
    """The key ``key_id``, or None if there is none (or its principal is gone)."""
    row = (await conn.execute(KEY_BY_ID, {"p_id": key_id})).first()
    if row is None:
        return None
    now = row.now
    usable = (
        row.revoked_at is None
        and row.disabled_at is None
        and (row.expires_at is None or row.expires_at > now)
    )
    return KeyRecord(row.principal, row.secret_sha256, usable)


async def load_principal(conn: AsyncConnection, name: str) -> tuple[Grant, ...] | None:
    """The grants of principal ``name``; None if it does not exist or is disabled."""
    row = (await conn.execute(PRINCIPAL_BY_NAME, {"p_name": name})).first()
    if row is None or row.disabled_at is not None:
        return None
    rows = (await conn.execute(GRANTS_OF, {"p_principal": name})).all()
    return grants_from((r.namespace, r.role, json.loads(r.queues or "[]")) for r in rows)


@builder(name="alice", description="d")
def insert_principal_stmt(name: str, description: str) -> Insert:
    """Creates principal ``name`` (``created_at`` = now) unless it exists (then nothing happens)."""
    stmt = pg_insert(principals).values(name=name, description=description, created_at=func.now())
    return stmt.on_conflict_do_nothing(index_elements=["name"])


@builder(principal="alice", key_id="0" * 16, secret_sha256="0" * 64, description="d", expires_at=None)
def insert_key_stmt(
    principal: str, key_id: str, secret_sha256: str, description: str, expires_at: datetime | None
) -> Insert:
    """Stores API key ``key_id`` of ``principal`` (its secret's hex SHA-256); ``expires_at`` None = never."""
    return api_keys.insert().values(
        id=key_id,
        principal=principal,
        secret_sha256=secret_sha256,
        description=description,
        created_at=func.now(),
        expires_at=expires_at,
    )


@builder(principal="alice", namespace="ns", role="worker", queues="[]")
def upsert_grant_stmt(principal: str, namespace: str, role: str, queues: str) -> Insert:
    """Grants ``role`` in ``namespace`` to ``principal`` (``queues``: JSON list; an existing grant
    of that role there gets the new queue list)."""
    stmt = pg_insert(grants).values(
        principal=principal, namespace=namespace, role=role, queues=queues, created_at=func.now()
    )
    return stmt.on_conflict_do_update(
        index_elements=["principal", "namespace", "role"], set_={"queues": queues}
    )


@builder(principal="alice", namespace="ns", role="worker")
def delete_grant_stmt(principal: str, namespace: str, role: str) -> ReturningDelete[Any]:
    """Removes the grant of ``role`` in ``namespace`` from ``principal``; returns the removed row."""
    return (
        delete(grants)
        .where(grants.c.principal == principal, grants.c.namespace == namespace, grants.c.role == role)
        .returning(grants.c.principal)
    )


@builder(key_id="0" * 16)
def revoke_key_stmt(key_id: str) -> Update:
    """Marks API key ``key_id`` revoked now (unless already revoked); returns (id, principal)."""
    return (
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(api_keys.c.id, api_keys.c.principal)
    )


@builder(principal="alice")
def keys_of_stmt(principal: str) -> Select[Any]:
    """The API keys of ``principal`` (no secrets): id, description, created_at, expires_at, revoked_at."""
    return (
        select(
            api_keys.c.id,
            api_keys.c.description,
            api_keys.c.created_at,
            api_keys.c.expires_at,
            api_keys.c.revoked_at,
        )
        .where(api_keys.c.principal == principal)
        .order_by(api_keys.c.created_at, api_keys.c.id)
    )


async def ensure_principal(conn: AsyncConnection, name: str, description: str = "") -> None:
    """Creates principal ``name`` if it does not exist."""
    await conn.execute(insert_principal_stmt(name, description))


async def add_key(
    conn: AsyncConnection,
    principal: str,
    key: ApiKey,
    description: str = "",
    expires_at: datetime | None = None,
) -> None:
    """Stores ``key`` (hashed) for ``principal``. Raises ``sqlalchemy.exc.IntegrityError`` if the id is taken."""
    await conn.execute(insert_key_stmt(principal, key.id, key.secret_sha256, description, expires_at))


async def grant(
    conn: AsyncConnection, principal: str, namespace: str, role: Role, queues: Iterable[str] = ()
) -> None:
    """Grants ``role`` in ``namespace`` (or ``*``) to ``principal``; ``queues`` for the worker role."""
    await conn.execute(upsert_grant_stmt(principal, namespace, role.value, json.dumps(sorted(set(queues)))))
