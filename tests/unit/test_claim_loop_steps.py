"""``ClaimLoop.claim_once`` is three steps, each small: choosing the targets and caps (``_plan``),
the fenced claim transaction (``_claim``), and accounting and delivery after the commit
(``_settle``). Every function of the claim loop's module stays at cyclomatic complexity <= 12
(ruff's C901, stricter than the project's gate of 15)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

from gnomon.dispatcher import claims

MODULE = Path(claims.__file__)


def test_claim_once_runs_the_three_steps_in_order():
    body = ast.parse(textwrap.dedent(inspect.getsource(claims.ClaimLoop.claim_once)))
    calls = [
        n.func.attr
        for n in sorted(
            (n for n in ast.walk(body) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
        )
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        if n.func.value.id == "self"
    ]
    assert [c for c in calls if c in ("_plan", "_claim", "_settle")] == ["_plan", "_claim", "_settle"]


def test_every_function_of_the_claim_loop_is_at_most_complexity_12():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--select",
            "C901",
            "--config",
            "lint.mccabe.max-complexity=12",
        ]
        + ["--output-format", "concise", "--no-cache", str(MODULE)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
