"""The storage of namespaces, principals, API keys and grants (gnomon.common.storage.namespaces and
.tenancy) against a real database: the default namespace row, compare-and-set updates, refused
deletes, capped counts, key revocation as the authenticator sees it, grant listings and paging."""

from __future__ import annotations

import pytest

from gnomon.common.auth import keys
from gnomon.common.auth.principals import ALL, Grant, Role
from gnomon.common.errors import AlreadyExists, FailedPrecondition, NotFound
from gnomon.common.quotas import Quotas
from gnomon.common.storage import jobs as jobs_store
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage import tenancy
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.namespaces import NamespaceRecord
from gnomon_test_support import DIALECTS, new_job_spec

#: every statement runs through both dialects (PostgreSQL, and CockroachDB's against PostgreSQL)
dialect = pytest.fixture(params=DIALECTS)(lambda request: request.param)


async def tx(engine, fn):
    return await run_transaction(engine, fn)


async def test_default_namespace_row_exists_without_limits(engine):
    rec = await tx(engine, lambda c: ns_store.get_namespace(c, "default"))
    assert (rec.quotas, rec.etag) == (Quotas(), "1")
    assert await tx(engine, lambda c: ns_store.find_quotas(c, "nowhere")) is None


async def test_namespace_update_is_compare_and_set_and_delete_refuses_a_busy_namespace(engine):
    rec = NamespaceRecord("team", "t", 3600, Quotas(max_pending_jobs=5))
    made = await tx(engine, lambda c: ns_store.create_namespace(c, rec))
    assert (made.version, made.created_at == made.updated_at) == (1, True)
    with pytest.raises(AlreadyExists) as e:
        await tx(engine, lambda c: ns_store.create_namespace(c, rec))
    assert e.value.reason == "NAMESPACE_EXISTS"
    new = await tx(engine, lambda c: ns_store.update_namespace(c, made.with_values(description="u"), "1"))
    assert (new.version, new.description, new.quotas.max_pending_jobs) == (2, "u", 5)
    with pytest.raises(FailedPrecondition) as e:
        await tx(engine, lambda c: ns_store.update_namespace(c, made, "1"))
    assert e.value.reason == "STALE_VERSION"
    for _ in range(3):
        await tx(engine, lambda c: jobs_store.insert_job(c, new_job_spec(namespace="team")))
    assert await tx(engine, lambda c: ns_store.count_pending_jobs(c, "team", cap=2)) == 2
    assert await tx(engine, lambda c: ns_store.count_pending_jobs(c, "team", cap=10)) == 3
    with pytest.raises(FailedPrecondition) as e:
        await tx(engine, lambda c: ns_store.delete_namespace(c, "team", ""))
    assert e.value.reason == "NAMESPACE_NOT_EMPTY"
    assert (await tx(engine, lambda c: ns_store.get_namespace(c, "team"))).version == 2
    with pytest.raises(NotFound) as e:
        await tx(engine, lambda c: ns_store.delete_namespace(c, "ghost", ""))
    assert e.value.reason == "NAMESPACE_NOT_FOUND"


async def test_namespace_listing_pages_and_filters(engine):
    for name in ("b", "a", "c"):
        await tx(engine, lambda c, n=name: ns_store.create_namespace(c, NamespaceRecord(n, "", 0, Quotas())))
    page = await tx(engine, lambda c: ns_store.list_namespaces(c, after=None, limit=2))
    assert [r.name for r in page] == ["a", "b"]
    page = await tx(engine, lambda c: ns_store.list_namespaces(c, after="b", limit=10))
    assert [r.name for r in page] == ["c", "default"]
    only = await tx(engine, lambda c: ns_store.list_namespaces(c, after=None, limit=10, only=["c", "zz"]))
    assert [r.name for r in only] == ["c"]


async def test_revoked_or_disabled_keys_are_unusable_and_listings_hide_secrets(engine):
    key = keys.generate()
    await tx(engine, lambda c: tenancy.create_principal(c, "svc", "a service"))
    with pytest.raises(AlreadyExists):
        await tx(engine, lambda c: tenancy.create_principal(c, "svc", ""))
    info = await tx(engine, lambda c: tenancy.create_key(c, "svc", key, "ci", None))
    assert (info.id, info.principal, info.revoked_at) == (key.id, "svc", None)
    assert (await tx(engine, lambda c: tenancy.load_key(c, key.id))).usable
    listed = await tx(engine, lambda c: tenancy.list_keys(c, "svc", after=None, limit=10))
    assert listed == [info]
    first = await tx(engine, lambda c: tenancy.revoke_key(c, "svc", key.id))
    again = await tx(engine, lambda c: tenancy.revoke_key(c, "svc", key.id))
    assert first.revoked_at is not None and again.revoked_at == first.revoked_at
    assert not (await tx(engine, lambda c: tenancy.load_key(c, key.id))).usable
    with pytest.raises(NotFound) as e:
        await tx(engine, lambda c: tenancy.revoke_key(c, "other", key.id))
    assert e.value.reason == "API_KEY_NOT_FOUND"

    key2 = keys.generate()
    await tx(engine, lambda c: tenancy.create_key(c, "svc", key2, "", None))
    await tx(engine, lambda c: tenancy.disable_principal(c, "svc"))
    assert not (await tx(engine, lambda c: tenancy.load_key(c, key2.id))).usable
    with pytest.raises(NotFound) as e:
        await tx(engine, lambda c: tenancy.create_key(c, "ghost", keys.generate(), "", None))
    assert e.value.reason == "PRINCIPAL_NOT_FOUND"


async def test_keys_page_by_creation_then_id(engine):
    await tx(engine, lambda c: tenancy.create_principal(c, "many", ""))
    made = [
        await tx(engine, lambda c: tenancy.create_key(c, "many", keys.generate(), "", None)) for _ in range(3)
    ]
    first = await tx(engine, lambda c: tenancy.list_keys(c, "many", after=None, limit=2))
    rest = await tx(
        engine, lambda c: tenancy.list_keys(c, "many", after=(first[-1].created_at, first[-1].id), limit=2)
    )
    assert sorted(k.id for k in first + rest) == sorted(k.id for k in made) and len(rest) == 1


async def test_grants_list_filter_page_and_revoke(engine):
    for p in ("alice", "bob"):
        await tx(engine, lambda c, p=p: tenancy.create_principal(c, p, ""))
    await tx(engine, lambda c: tenancy.add_grant(c, "alice", "a", Role.CLIENT))
    await tx(engine, lambda c: tenancy.add_grant(c, "alice", ALL, Role.READER))
    w = await tx(engine, lambda c: tenancy.add_grant(c, "bob", "a", Role.WORKER, ["q2", "q1"]))
    assert w.queues == ("q1", "q2")
    with pytest.raises(NotFound):
        await tx(engine, lambda c: tenancy.add_grant(c, "ghost", "a", Role.CLIENT))
    in_a = await tx(
        engine, lambda c: tenancy.list_grants(c, namespace="a", principal=None, after=None, limit=10)
    )
    assert [(g.principal, g.role) for g in in_a] == [("alice", "client"), ("bob", "worker")]
    page1 = await tx(
        engine, lambda c: tenancy.list_grants(c, namespace=None, principal=None, after=None, limit=2)
    )
    last = page1[-1]
    page2 = await tx(
        engine,
        lambda c: tenancy.list_grants(
            c, namespace=None, principal=None, after=(last.principal, last.namespace, last.role), limit=2
        ),
    )
    assert [(g.principal, g.namespace) for g in page1 + page2] == [
        ("alice", "*"),
        ("alice", "a"),
        ("bob", "a"),
    ]
    assert await tx(engine, lambda c: tenancy.load_principal(c, "bob")) == (
        Grant("a", Role.WORKER, ("q1", "q2")),
    )
    assert await tx(engine, lambda c: tenancy.revoke_grant(c, "bob", "a", Role.WORKER))
    assert not await tx(engine, lambda c: tenancy.revoke_grant(c, "bob", "a", Role.WORKER))
    assert await tx(engine, lambda c: tenancy.load_principal(c, "bob")) == ()
    mine = await tx(engine, lambda c: tenancy.grants_of(c, "alice"))
    assert [(g.namespace, g.role) for g in mine] == [("*", "reader"), ("a", "client")]
    assert mine[0].created_at.tzinfo is not None
