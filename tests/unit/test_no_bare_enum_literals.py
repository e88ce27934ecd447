"""States, policies, failure classes and error reasons are written as members of the domain's
``StrEnum``s (``gnomon.common.domain``; in the Python SDK, which does not import the server's
modules, its own: :class:`gnomon.sdk.attempts.AttemptPhase`), never as bare strings.

The members equal their text, so ``state == "DEAD"`` works, but it hides every use of a state from a
grep for ``JobState.DEAD`` and a misspelt ``"DAED"`` is silently never true. This walks the AST of
every handwritten module of ``gnomon.common`` (except ``gnomon.common.domain``, where the enums are
defined), of the services and of the Python SDK (``gnomon.sdk``), and fails on:

* a comparison ``==`` / ``!=`` with a string literal that is a member value;
* a membership test ``in`` / ``not in`` against a tuple, list or set literal holding such a string;
* a keyword argument ``reason="..."`` (or ``reason=... if ... else "..."``) with such a string;
* an assignment of such a string to a ``state`` (``att.state = "done"``, ``state = "QUEUED"``);
* a keyword argument ``quota="..."`` with any string: quota names are :class:`gnomon.common.quotas.Quota`
  members.

SQL text inside string literals is not looked at.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.policies import BreakerState, MisfirePolicy, OverlapPolicy
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.domain.states import AttemptState, JobState
from gnomon.sdk.attempts import AttemptPhase
from gnomon.sdk.protocol import AckReason

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "libs" / "common" / "gnomon" / "common"
DOMAIN = COMMON / "domain"
SDK = ROOT / "libs" / "sdk" / "gnomon" / "sdk"
ENUMS = (
    JobState,
    AttemptState,
    FailureClass,
    MisfirePolicy,
    OverlapPolicy,
    BreakerState,
    ErrorReason,
    AttemptPhase,
    AckReason,
)
#: member value -> the members that have it (e.g. "SKIP": OverlapPolicy.SKIP).
VALUES: dict[str, list[str]] = {}
for _enum in ENUMS:
    for _member in _enum:
        VALUES.setdefault(_member.value, []).append(f"{_enum.__name__}.{_member.name}")

#: Files not yet converted, each with who converts it; an entry must still be needed (see
#: test_exemptions_are_still_needed), so remove it with the last literal.
EXEMPT: set[str] = set()


#: Literal collections a membership test is checked against.
_COLLECTIONS = (ast.Tuple, ast.List, ast.Set)


def _is_generated(path: Path) -> bool:
    return path.name.endswith(("_pb2.py", "_pb2_grpc.py")) or "_proto" in path.parts


def _modules() -> list[Path]:
    roots = [COMMON, *sorted((ROOT / "services").glob("*/gnomon")), SDK]
    files = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.is_relative_to(DOMAIN) or _is_generated(path) or ".venv" in path.parts:
                continue
            files.append(path)
    return files


def _literals(node: ast.expr) -> Iterator[ast.Constant]:
    """String constants ``node`` evaluates to: a literal, or either branch of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)


def _bare_enum_literals(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """``(line, what, value)`` for each bare member value used as described in the module docstring."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                right = operands[i + 1]
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    for side in (operands[i], right):
                        if isinstance(side, ast.Constant) and side.value in VALUES:
                            yield side.lineno, "compared with", side.value
                elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, _COLLECTIONS):
                    for elt in right.elts:
                        if isinstance(elt, ast.Constant) and elt.value in VALUES:
                            yield elt.lineno, "tested for membership", elt.value
        elif isinstance(node, ast.keyword) and node.arg == "reason":
            for lit in _literals(node.value):
                if lit.value in VALUES:
                    yield lit.lineno, "passed as reason=", lit.value
        elif isinstance(node, ast.keyword) and node.arg == "quota":
            for lit in _literals(node.value):
                yield lit.lineno, "passed as quota=", str(lit.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_state(t) for t in targets):
                for lit in _literals(node.value):
                    if lit.value in VALUES:
                        yield lit.lineno, "assigned to a state", lit.value


def _names_state(target: ast.expr) -> bool:
    """Whether an assignment target is a ``state``: a name ``state`` or an attribute ``x.state``."""
    return (isinstance(target, ast.Name) and target.id == "state") or (
        isinstance(target, ast.Attribute) and target.attr == "state"
    )


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(ROOT).as_posix()
    return [
        f"{rel}:{line}: {value!r} {what}: use {' or '.join(VALUES.get(value, ['a Quota member']))}"
        for line, what, value in sorted(set(_bare_enum_literals(tree)))
    ]


def test_the_walk_sees_common_and_every_service():
    rels = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert "libs/common/gnomon/common/storage/cancel.py" in rels
    for service in ("api", "dispatcher", "planner", "reaper"):
        assert any(r.startswith(f"services/{service}/gnomon/{service}/") for r in rels), service
    assert not any(r.startswith("libs/common/gnomon/common/domain/") for r in rels)
    assert not any(r.endswith("_pb2.py") for r in rels)
    assert "libs/sdk/gnomon/sdk/runner.py" in rels  # the Python SDK too


def test_the_check_catches_bare_literals_and_passes_members():
    bad = """
if state == "DEAD": pass
if "CLOSED" != breaker: pass
if row["state"] in ("SCHEDULED", "QUEUED"): pass
if policy not in {"ALLOW"}: pass
raise GnomonError("x", reason="STALE_VERSION")
ack(reason="" if ok else "STALE_ATTEMPT")
att.state = "done"
state: str = "QUEUED"
raise QuotaExceeded("full", quota="dispatcher_streams")
"""
    found = sorted((line, value) for line, _, value in _bare_enum_literals(ast.parse(bad)))
    assert found == [
        (2, "DEAD"),
        (3, "CLOSED"),
        (4, "QUEUED"),
        (4, "SCHEDULED"),
        (5, "ALLOW"),
        (6, "STALE_VERSION"),
        (7, "STALE_ATTEMPT"),
        (8, "done"),
        (9, "QUEUED"),
        (10, "dispatcher_streams"),
    ]
    good = """
if state == JobState.DEAD: pass
if row["state"] in (JobState.SCHEDULED, JobState.QUEUED): pass
if kind == "INTERVAL" or name == "": pass
raise GnomonError("x", reason=ErrorReason.STALE_VERSION)
log.info("moved to DEAD")
att.state = AttemptPhase.DONE
label = "done"
raise QuotaExceeded("full", quota=Quota.DISPATCHER_STREAMS)
stmt = text("UPDATE jobs SET state = 'DEAD'")
"""
    assert list(_bare_enum_literals(ast.parse(good))) == []


def test_the_sdk_ack_reasons_are_server_reasons():
    # the SDK does not import gnomon.common: its AckReason repeats the text of the server's reasons
    # (NOT_FOUND, taken as final by the SDK, is no reason the server sends today)
    assert {r.value for r in AckReason} - {r.value for r in ErrorReason} == {"NOT_FOUND"}


def test_no_bare_enum_literals():
    found = []
    for path in _modules():
        if path.relative_to(ROOT).as_posix() not in EXEMPT:
            found += _findings(path)
    assert not found, "use the enum member (gnomon.common.domain; in the SDK, its own):\n" + "\n".join(found)


def test_exemptions_are_still_needed():
    stale = [rel for rel in sorted(EXEMPT) if not (ROOT / rel).is_file() or not _findings(ROOT / rel)]
    assert not stale, f"no bare enum literal left: remove from EXEMPT: {stale}"
