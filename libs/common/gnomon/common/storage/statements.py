"""The registry of named SQL statements: every statement the storage layer executes has a name, a
docstring and an entry here, so ``tests/unit/test_storage_statements.py`` can compile each one for
both dialects (PostgreSQL and CockroachDB) and a new statement cannot be forgotten.

Two kinds of entries:

* a prebuilt statement (module constant), registered with :func:`named`; it is built once at import
  and executed as is (SQLAlchemy then reuses its compiled form and cache key);
* a statement builder (module function returning a statement), registered with :func:`builder`
  together with sample arguments the test builds it with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.sql.base import Executable

__all__ = ["REGISTRY", "NamedStatement", "builder", "named"]


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
