"""The registry of named SQL statements: every statement the storage layer executes has a name, a
docstring and an entry here, so ``tests/unit/test_storage_statements.py`` can compile each one for
both dialects (PostgreSQL and CockroachDB) and a new statement cannot be forgotten.

Two kinds of entries:

* a prebuilt statement (module constant), registered with :func:`named`; it is built once at import
  and executed as is, and SQLAlchemy reuses its compiled form: also when it holds a PostgreSQL
  ``INSERT ... ON CONFLICT``, which SQLAlchemy never caches by itself (:func:`pin_cache_key`);
* a statement builder (module function returning a statement), registered with :func:`builder`
  together with sample arguments the test builds it with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.cache_key import CacheKey

__all__ = ["REGISTRY", "NamedStatement", "builder", "named", "pin_cache_key"]


@dataclass(frozen=True)
class NamedStatement:
    """One registered statement: ``name`` is ``<module>.<NAME>`` (the module without the
    ``gnomon.common.storage.`` prefix), ``doc`` says what it does, its parameters and their units,
    ``build`` returns the statement (for a prebuilt one, the object itself)."""

    name: str
    doc: str
    build: Callable[[], Executable | tuple[Executable, ...]]
    prebuilt: bool


#: name -> entry, filled as the storage modules are imported.
REGISTRY: dict[str, NamedStatement] = {}

_S = TypeVar("_S", bound=Executable)
_F = TypeVar("_F", bound=Callable[..., Executable | tuple[Executable, ...]])
_PREFIX = "gnomon.common.storage."


def _key(module: str, name: str) -> str:
    return f"{module.removeprefix(_PREFIX)}.{name}"


def _add(entry: NamedStatement) -> None:
    if not entry.doc.strip():
        raise ValueError(f"statement {entry.name} has no docstring")
    REGISTRY[entry.name] = entry


def named(module: str, name: str, doc: str, stmt: _S) -> _S:
    """Registers the prebuilt statement ``stmt`` as ``module.name`` with docstring ``doc`` (what it
    does, its bound parameters and their units) and returns it unchanged. Raises ``ValueError`` for
    an empty ``doc``."""
    _add(NamedStatement(_key(module, name), doc, lambda: stmt, prebuilt=True))
    return pin_cache_key(_key(module, name), stmt)


#: id of a pinned prebuilt statement -> (the statement, its cache key); they live as long as the
#: process (module constants), so their ids stay theirs.
_PINNED: dict[int, tuple[Any, CacheKey]] = {}
_PINNED_CLASSES: dict[type, type] = {}


def _pinned_cache_key(self: Any) -> CacheKey | None:
    got = _PINNED.get(id(self))
    if got is not None and got[0] is self:
        return got[1]
    # a copy made from a pinned statement (a generative method): SQLAlchemy's own answer
    return super(type(self), self)._generate_cache_key()  # type: ignore[no-any-return]


def pin_cache_key(name: str, stmt: _S) -> _S:
    """Gives the prebuilt statement ``stmt`` (a module constant, never changed after) the cache key
    ``("gnomon.prebuilt", name)`` when SQLAlchemy computes none for it, so its compiled form is
    cached per dialect and reused on every execution; returns ``stmt`` itself.

    SQLAlchemy computes no cache key for a statement holding a PostgreSQL ``INSERT`` (its dialect's
    ``Insert`` sets ``inherit_cache = False``: the ``ON CONFLICT`` clause has no cache key), so such
    a statement is compiled again on every execution: ~4-8 ms of CPU for the claim statement with
    its ``queue_claims`` upsert, measured 2026-12-03. The statement's object is fixed, so its
    compiled form cannot change: the key is pinned to that object only (its class is swapped for a
    subclass whose ``_generate_cache_key`` answers the pinned key for it alone, and SQLAlchemy's own
    answer, None, for any copy a generative method makes of it). The pinned key carries no bound
    parameters: every value the statement binds itself (``literal(...)``) is the compiled form's own."""
    if stmt._generate_cache_key() is not None:  # type: ignore[attr-defined]  # not on Executable
        return stmt
    base = type(stmt)
    cls = _PINNED_CLASSES.get(base)
    if cls is None:
        cls = _PINNED_CLASSES[base] = type(
            f"Pinned{base.__name__}",
            (base,),
            # inherit_cache False, as the base's: a copy of the statement, or a statement that
            # embeds it, gets SQLAlchemy's own answer (no cache key) without SQLAlchemy traversing
            # into the ON CONFLICT clause, which warns that it cannot be cached (an error in tests)
            {"inherit_cache": False, "_generate_cache_key": _pinned_cache_key, "__module__": __name__},
        )
    stmt.__class__ = cls
    stmt.__dict__.pop("_generate_cache_key", None)  # the None SQLAlchemy memoized on the instance
    _PINNED[id(stmt)] = (stmt, CacheKey(("gnomon.prebuilt", name), []))
    return stmt


def builder(**sample: Any) -> Callable[[_F], _F]:
    """Decorator: registers a function that builds a statement (its own docstring documents it);
    ``sample`` are keyword arguments the compile test calls it with. Returns the function unchanged.
    Raises ``ValueError`` if the function has no docstring."""

    def register(fn: _F) -> _F:
        """Adds ``fn`` to :data:`REGISTRY` under ``<module>.<name>``; returns it unchanged."""
        _add(
            NamedStatement(
                _key(fn.__module__, fn.__name__), fn.__doc__ or "", lambda: fn(**sample), prebuilt=False
            )
        )
        return fn

    return register
