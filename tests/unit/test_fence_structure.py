"""The fence cannot be forgotten, checked on the source: no storage function takes a ``fence``
switch; the shard-scoped writes take the :class:`Fenced` transaction of ``run_fenced`` (never a bare
connection); every call of them in the services and libraries sits inside a ``run_fenced`` unit or a
function handed one; and the fence checks themselves run nowhere but in ``run_fenced``."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import gnomon.common.storage as storage_pkg
import gnomon.dispatcher as dispatcher_pkg

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    p for d in ("libs", "services") for p in (ROOT / d).rglob("gnomon/**/*.py") if "_proto" not in p.parts
)
FENCING = ROOT / "libs/common/gnomon/common/storage/fencing.py"
REGIONS = ROOT / "libs/common/gnomon/common/storage/regions.py"
#: The statements that write shard-scoped rows under a fencing token: the claim (jobs SCHEDULED ->
#: QUEUED and their attempt rows) and the outbox re-stamp of QUEUED attempts.
FENCED_STATEMENTS = {"CLAIM", "restamp_attempts_stmt"}


def _modules(pkg) -> Iterator:
    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        if not info.name.endswith(".migrations"):
            yield importlib.import_module(info.name)


def _functions(module) -> Iterator[tuple[str, object]]:
    for name, obj in vars(module).items():
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for m, f in vars(obj).items():
                if inspect.isfunction(f):
                    yield f"{name}.{m}", f


def _first_param_annotation(fn) -> str | None:
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    return str(params[0].annotation) if params else None


def fenced_functions() -> dict[str, set[str]]:
    """Storage function name -> the modules defining it, for every storage function whose first
    parameter is a ``Fenced``."""
    out: dict[str, set[str]] = {}
    for module in _modules(storage_pkg):
        for name, fn in _functions(module):
            if _first_param_annotation(fn) == "Fenced":
                out.setdefault(name, set()).add(module.__name__)
    return out


def _is_fence_switch(p: inspect.Parameter) -> bool:
    """A parameter that turns fencing on or off (``fence: bool = True``, ``skip_fence=False``...):
    named after the fence and a boolean by its annotation or default."""
    return "fence" in p.name.lower() and (
        str(p.annotation) in {"bool", "bool | None"} or isinstance(p.default, bool)
    )


def test_no_storage_or_dispatcher_function_takes_a_fence_switch():
    found = [
        f"{m.__name__}.{name}"
        for pkg in (storage_pkg, dispatcher_pkg)
        for m in _modules(pkg)
        for name, fn in _functions(m)
        if any(_is_fence_switch(p) for p in inspect.signature(fn).parameters.values())
    ]
    assert found == []


def test_every_function_running_a_fenced_statement_takes_a_fenced_transaction():
    offenders, users = [], []
    for path in sorted((ROOT / "libs/common/gnomon/common/storage").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if not names & FENCED_STATEMENTS or node.name in FENCED_STATEMENTS:
                continue
            users.append(node.name)
            first = node.args.args[0] if node.args.args else None
            if first is None or ast.unparse(first.annotation or ast.Constant(None)) != "Fenced":
                offenders.append(f"{path.name}:{node.name}")
    assert sorted(users) == ["claim_targets", "pending_outbox"]  # the check is not vacuous
    assert offenders == []
    assert {"claim_due", "claim_targets", "pending_outbox"} <= set(fenced_functions())


def _enclosing(tree: ast.AST) -> dict[ast.AST, list[ast.AST]]:
    """node -> its ancestors, innermost first."""
    parents: dict[ast.AST, list[ast.AST]] = {tree: []}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = [node, *parents[node]]
    return parents


def _inside_run_fenced(node: ast.Call, ancestors: list[ast.AST]) -> bool:
    """True if ``node`` is in a lambda passed to ``run_fenced(...)``, or in a function whose
    parameters include one annotated ``Fenced`` (which only ``run_fenced`` hands out)."""
    for i, a in enumerate(ancestors):
        if isinstance(a, ast.Lambda):
            call = ancestors[i + 1] if i + 1 < len(ancestors) else None
            if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("run_fenced"):
                return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return any(
                p.annotation is not None and ast.unparse(p.annotation) == "Fenced"
                for p in [*a.args.posonlyargs, *a.args.args, *a.args.kwonlyargs]
            )
    return False


def _imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> the module (for ``import``/``from package import module``) or ``module.name``
    (for ``from module import name``) it stands for; the module's own top-level functions too."""
    out = {
        n.name: f"{module}.{n.name}"
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name] = a.name
    return out


def _target(call: ast.Call, imports: dict[str, str]) -> str | None:
    """The dotted name ``module.function`` a call resolves to through the file's imports."""
    if isinstance(call.func, ast.Name):
        return imports.get(call.func.id)
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        base = imports.get(call.func.value.id)
        return f"{base}.{call.func.attr}" if base else None
    return None


def test_every_fenced_write_in_the_services_and_libraries_runs_inside_run_fenced():
    fenced = {f"{m}.{name}" for name, modules in fenced_functions().items() for m in modules}
    calls, offenders = 0, []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        parts = path.with_suffix("").parts
        module = ".".join(parts[parts.index("gnomon") :])
        imports, parents = _imports(tree, module), _enclosing(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _target(node, imports) in fenced:
                calls += 1
                if not _inside_run_fenced(node, parents[node]):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {_target(node, imports)}")
    assert calls >= 3  # the dispatcher's claim and re-publication, the storage helper claim_due
    assert offenders == []


def test_the_fence_checks_run_only_inside_run_fenced():
    """``check_fence``, ``check_region_fence`` and the ``Fenced`` transaction are used nowhere but in
    the fencing module (and ``check_region_fence``'s own module): a hand-rolled fence is the one
    that gets forgotten."""
    used = []
    for path in SOURCES:
        if path in (FENCING, REGIONS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if isinstance(node, ast.alias):
                name = node.name
            if name in {"check_fence", "check_region_fence", "FENCE"}:
                used.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')} {name}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Fenced":
                used.append(f"{path.relative_to(ROOT)}:{node.lineno} Fenced(...)")
    assert used == []
