"""Every prebuilt named statement has a cache key, so SQLAlchemy compiles it once per dialect and
reuses the compiled form: also those holding a PostgreSQL ``INSERT ... ON CONFLICT`` (the claim with
its ``queue_claims`` upsert), for which SQLAlchemy computes none by itself and compiled the claim on
every execution (storage.statements.pin_cache_key)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from sqlalchemy.dialects import postgresql

import gnomon.common.storage as storage
from gnomon.common.storage.statements import REGISTRY

for _m in pkgutil.iter_modules(storage.__path__):
    if _m.name != "migrations":
        importlib.import_module(f"{storage.__name__}.{_m.name}")

PREBUILT = sorted(name for name, e in REGISTRY.items() if e.prebuilt)


@pytest.mark.parametrize("name", PREBUILT)
def test_every_prebuilt_statement_has_a_cache_key(name: str) -> None:
    stmt = REGISTRY[name].build()
    key = stmt._generate_cache_key()  # type: ignore[union-attr]
    assert key is not None, f"{name} would be compiled on every execution"
    assert stmt._generate_cache_key() == key  # type: ignore[union-attr]


def test_the_claim_statement_is_pinned_and_a_copy_of_it_is_not() -> None:
    from gnomon.common.storage.claims import CLAIM

    assert CLAIM._generate_cache_key() is not None
    copy = CLAIM.limit(3)  # a different statement: it must not answer the claim's compiled form
    assert copy._generate_cache_key() is None
    d = postgresql.psycopg.dialect()
    assert "LIMIT" in str(copy.compile(dialect=d)).splitlines()[-1]
    assert str(CLAIM.compile(dialect=d)) != str(copy.compile(dialect=d))


def test_a_pinned_key_names_its_statement() -> None:
    from gnomon.common.storage.claims import CLAIM
    from gnomon.common.storage.queues import INSERT_STATE

    assert CLAIM._generate_cache_key() != INSERT_STATE._generate_cache_key()


@pytest.mark.parametrize("dialect", ["postgresql", "cockroachdb"])
def test_the_fence_with_the_next_due_read_compiles_for_both_dialects(dialect: str) -> None:
    from gnomon.common.storage import dialect as D
    from gnomon.common.storage.claims import NEXT_DUE
    from gnomon.common.storage.fencing import fence_and_read

    d = postgresql.psycopg.dialect() if dialect == "postgresql" else D.cockroach_dialect()
    stmt = fence_and_read(NEXT_DUE)
    assert fence_and_read(NEXT_DUE) is stmt  # built once
    sql = str(stmt.compile(dialect=d))
    assert sql.startswith("WITH fenced_shards AS") and "UPDATE shard_owners" in sql and "first_due" in sql
    assert stmt._generate_cache_key() is not None  # compiled once per dialect


def test_a_copy_of_a_pinned_insert_has_no_key_and_does_not_warn():
    # ``.values(...)`` copies the pinned statement (the planner's single-occurrence insert). The copy
    # must get SQLAlchemy's own answer (no key) without traversing into ON CONFLICT, which warns
    # (an error under this project's warning filter: it failed a CI run once).
    import uuid
    import warnings

    from gnomon.common.storage.planning import INSERT_OCCURRENCES

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert INSERT_OCCURRENCES.values(id=uuid.uuid4())._generate_cache_key() is None
        assert INSERT_OCCURRENCES._generate_cache_key() is not None
