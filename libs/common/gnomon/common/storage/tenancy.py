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
from sqlalchemy.sql.dml import ReturningDelete, ReturningInsert

from gnomon.common.auth.keys import ApiKey
from gnomon.common.auth.principals import Grant, Role, grants_from
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import AlreadyExists, NotFound
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
def upsert_grant_stmt(principal: str, namespace: str, role: str, queues: str) -> ReturningInsert[Any]:
    """Grants ``role`` in ``namespace`` to ``principal`` (``queues``: JSON list; an existing grant
    of that role there gets the new queue list); returns the stored row."""
    stmt = pg_insert(grants).values(
        principal=principal, namespace=namespace, role=role, queues=queues, created_at=func.now()
    )
    return stmt.on_conflict_do_update(
        index_elements=["principal", "namespace", "role"], set_={"queues": queues}
    ).returning(*grants.c)


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
) -> GrantRecord:
    """Grants ``role`` in ``namespace`` (or ``*``) to ``principal``; ``queues`` for the worker role.
    Returns the stored grant. (The principal is not checked here: see :func:`add_grant`.)"""
    row = (
        await conn.execute(
            upsert_grant_stmt(principal, namespace, role.value, json.dumps(sorted(set(queues))))
        )
    ).one()
    return _grant_record(row)


# ---- administration (AccessService) -------------------------------------------------------------


@dataclass(frozen=True)
class PrincipalRecord:
    """A stored principal: ``name`` (its id), ``description``, database instants ``created_at`` and
    ``disabled_at`` (None while enabled)."""

    name: str
    description: str
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True)
class KeyInfo:
    """A stored API key without its secret hash: ``id``, ``principal``, ``description`` and the
    database instants ``created_at``, ``expires_at`` (None: never), ``revoked_at`` (None: not revoked)."""

    id: str
    principal: str
    description: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class GrantRecord:
    """A stored grant: ``principal``, ``namespace`` (an id or ``*``), ``role`` (a :class:`Role` value;
    a newer server may have written one this one does not know), ``queues`` (worker role) and
    ``created_at``."""

    principal: str
    namespace: str
    role: str
    queues: tuple[str, ...]
    created_at: datetime


def _principal_record(row: Any) -> PrincipalRecord:
    return PrincipalRecord(row.name, row.description, row.created_at, row.disabled_at)


def _key_info(row: Any) -> KeyInfo:
    return KeyInfo(row.id, row.principal, row.description, row.created_at, row.expires_at, row.revoked_at)


def _grant_record(row: Any) -> GrantRecord:
    return GrantRecord(
        row.principal, row.namespace, row.role, tuple(sorted(json.loads(row.queues or "[]"))), row.created_at
    )


def _no_principal(name: str) -> NotFound:
    return NotFound(f"principal {name!r} does not exist", reason=ErrorReason.PRINCIPAL_NOT_FOUND)


KEY_INFO_BY_ID = named(
    __name__,
    "KEY_INFO_BY_ID",
    "The API key ``p_id`` of principal ``p_principal`` without its hash: (id, principal, description, "
    "created_at, expires_at, revoked_at); no row if there is none.",
    select(
        api_keys.c.id,
        api_keys.c.principal,
        api_keys.c.description,
        api_keys.c.created_at,
        api_keys.c.expires_at,
        api_keys.c.revoked_at,
    ).where(api_keys.c.id == bindparam("p_id"), api_keys.c.principal == bindparam("p_principal")),
)


@builder(name="alice", description="d")
def create_principal_stmt(name: str, description: str) -> ReturningInsert[Any]:
    """Creates principal ``name`` (``created_at`` = now) unless it exists; returns the new row (no
    row: it existed)."""
    stmt = pg_insert(principals).values(name=name, description=description, created_at=func.now())
    return stmt.on_conflict_do_nothing(index_elements=["name"]).returning(*principals.c)


@builder(after="a", limit=10)
def list_principals_stmt(after: str | None, limit: int) -> Select[Any]:
    """At most ``limit`` principals with names after ``after`` (None: from the first), by name."""
    stmt = select(principals).order_by(principals.c.name).limit(limit)
    return stmt if after is None else stmt.where(principals.c.name > after)


@builder(name="alice")
def disable_principal_stmt(name: str) -> Update:
    """Sets ``disabled_at`` of principal ``name`` to now unless already set; returns the row."""
    return (
        update(principals)
        .where(principals.c.name == name)
        .values(disabled_at=func.coalesce(principals.c.disabled_at, func.now()))
        .returning(*principals.c)
    )


@builder(principal="alice", after=None, limit=10)
def list_keys_stmt(principal: str, after: tuple[datetime, str] | None, limit: int) -> Select[Any]:
    """At most ``limit`` keys of ``principal`` (no hashes) after the keyset ``after``
    (created_at, id), oldest first."""
    c = api_keys.c
    stmt = (
        select(c.id, c.principal, c.description, c.created_at, c.expires_at, c.revoked_at)
        .where(c.principal == principal)
        .order_by(c.created_at, c.id)
        .limit(limit)
    )
    if after is not None:
        at, kid = after
        stmt = stmt.where((c.created_at > at) | ((c.created_at == at) & (c.id > kid)))
    return stmt


@builder(principal="alice", key_id="0" * 16)
def revoke_key_of_stmt(principal: str, key_id: str) -> Update:
    """Sets ``revoked_at`` of key ``key_id`` of ``principal`` to now unless already set; returns the
    key without its hash (no row: no such key)."""
    c = api_keys.c
    return (
        update(api_keys)
        .where(c.id == key_id, c.principal == principal)
        .values(revoked_at=func.coalesce(c.revoked_at, func.now()))
        .returning(c.id, c.principal, c.description, c.created_at, c.expires_at, c.revoked_at)
    )


@builder(namespace="ns", principal="alice", after=("a", "ns", "admin"), limit=10)
def list_grants_stmt(
    namespace: str | None, principal: str | None, after: tuple[str, str, str] | None, limit: int
) -> Select[Any]:
    """At most ``limit`` grants ordered by (principal, namespace, role) after the keyset ``after``;
    only those in ``namespace`` (None: every namespace, ``*`` included) and of ``principal`` (None: any)."""
    c = grants.c
    stmt = select(grants).order_by(c.principal, c.namespace, c.role).limit(limit)
    if namespace is not None:
        stmt = stmt.where(c.namespace == namespace)
    if principal is not None:
        stmt = stmt.where(c.principal == principal)
    if after is not None:
        p, ns, role = after
        stmt = stmt.where(
            (c.principal > p)
            | ((c.principal == p) & (c.namespace > ns))
            | ((c.principal == p) & (c.namespace == ns) & (c.role > role))
        )
    return stmt


async def create_principal(conn: AsyncConnection, name: str, description: str) -> PrincipalRecord:
    """Creates principal ``name``. Raises :class:`AlreadyExists` (PRINCIPAL_EXISTS) if it exists."""
    row = (await conn.execute(create_principal_stmt(name, description))).first()
    if row is None:
        raise AlreadyExists(f"principal {name!r} already exists", reason=ErrorReason.PRINCIPAL_EXISTS)
    return _principal_record(row)


async def get_principal(conn: AsyncConnection, name: str) -> PrincipalRecord:
    """The principal ``name``. Raises :class:`NotFound` (PRINCIPAL_NOT_FOUND)."""
    row = (await conn.execute(PRINCIPAL_BY_NAME, {"p_name": name})).first()
    if row is None:
        raise _no_principal(name)
    return _principal_record(row)


async def list_principals(conn: AsyncConnection, *, after: str | None, limit: int) -> list[PrincipalRecord]:
    """At most ``limit`` principals with names after ``after``, by name."""
    return [_principal_record(r) for r in (await conn.execute(list_principals_stmt(after, limit))).all()]


async def disable_principal(conn: AsyncConnection, name: str) -> PrincipalRecord:
    """Disables principal ``name`` (the first disable time is kept). Raises :class:`NotFound`
    (PRINCIPAL_NOT_FOUND)."""
    row = (await conn.execute(disable_principal_stmt(name))).first()
    if row is None:
        raise _no_principal(name)
    return _principal_record(row)


async def create_key(
    conn: AsyncConnection, principal: str, key: ApiKey, description: str, expires_at: datetime | None
) -> KeyInfo:
    """Stores ``key`` (hashed) for the existing ``principal``; returns it. Raises :class:`NotFound`
    (PRINCIPAL_NOT_FOUND)."""
    await get_principal(conn, principal)
    await add_key(conn, principal, key, description, expires_at)
    row = (await conn.execute(KEY_INFO_BY_ID, {"p_id": key.id, "p_principal": principal})).one()
    return _key_info(row)


async def list_keys(
    conn: AsyncConnection, principal: str, *, after: tuple[datetime, str] | None, limit: int
) -> list[KeyInfo]:
    """At most ``limit`` keys of ``principal`` after keyset ``after``, oldest first. Raises
    :class:`NotFound` (PRINCIPAL_NOT_FOUND)."""
    await get_principal(conn, principal)
    return [_key_info(r) for r in (await conn.execute(list_keys_stmt(principal, after, limit))).all()]


async def revoke_key(conn: AsyncConnection, principal: str, key_id: str) -> KeyInfo:
    """Revokes key ``key_id`` of ``principal`` (the first revoke time is kept). Raises
    :class:`NotFound` (API_KEY_NOT_FOUND)."""
    row = (await conn.execute(revoke_key_of_stmt(principal, key_id))).first()
    if row is None:
        raise NotFound(
            f"principal {principal!r} has no API key {key_id!r}", reason=ErrorReason.API_KEY_NOT_FOUND
        )
    return _key_info(row)


async def add_grant(
    conn: AsyncConnection, principal: str, namespace: str, role: Role, queues: Iterable[str] = ()
) -> GrantRecord:
    """:func:`grant` to an existing principal. Raises :class:`NotFound` (PRINCIPAL_NOT_FOUND)."""
    await get_principal(conn, principal)
    return await grant(conn, principal, namespace, role, queues)


async def revoke_grant(conn: AsyncConnection, principal: str, namespace: str, role: Role) -> bool:
    """Removes ``principal``'s ``role`` in ``namespace``; True if it held it."""
    return (await conn.execute(delete_grant_stmt(principal, namespace, role.value))).first() is not None


async def list_grants(
    conn: AsyncConnection,
    *,
    namespace: str | None,
    principal: str | None,
    after: tuple[str, str, str] | None,
    limit: int,
) -> list[GrantRecord]:
    """At most ``limit`` grants (see :func:`list_grants_stmt` for the filters and order)."""
    rows = (await conn.execute(list_grants_stmt(namespace, principal, after, limit))).all()
    return [_grant_record(r) for r in rows]


async def grants_of(conn: AsyncConnection, principal: str) -> list[GrantRecord]:
    """Every grant of ``principal`` (any namespace), by namespace then role."""
    rows = (await conn.execute(list_grants_stmt(None, principal, None, 10_000))).all()
    return sorted((_grant_record(r) for r in rows), key=lambda g: (g.namespace, g.role))
