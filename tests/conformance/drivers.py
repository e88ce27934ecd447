"""The conformance drivers the harness knows: one worker program per SDK (``tests/conformance/README.md``).

A :class:`Driver` is a name, the argv that starts it (relative paths are resolved against ``cwd``)
and the directory it runs in. :func:`selected` is what the harness runs: the available drivers,
narrowed by ``GNOMON_TEST_CONFORMANCE_DRIVERS`` (comma-separated names), plus any external driver given
with ``GNOMON_TEST_CONFORMANCE_DRIVER`` (a shell-quoted command line, e.g.
``GNOMON_TEST_CONFORMANCE_DRIVER="./my-worker --flag"``, named ``external``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The repository root (argv paths of the built-in drivers are relative to it).
ROOT = Path(__file__).resolve().parents[2]

#: Names of the drivers to run, comma-separated (unset or empty: every available one).
SELECT_ENV = "GNOMON_TEST_CONFORMANCE_DRIVERS"  # GNOMON_TEST_*: variables the services let pass
#: A command line (shell-quoted) of an extra driver named ``external``, run in the current directory.
EXTERNAL_ENV = "GNOMON_TEST_CONFORMANCE_DRIVER"


@dataclass(frozen=True)
class Driver:
    """One SDK's driver.

    Attributes:
        name: short id used in test ids and in ``GNOMON_TEST_CONFORMANCE_DRIVERS`` (e.g. ``"python"``).
        argv: the command; the harness adds only environment variables.
        cwd: the directory it runs in.
        available: ``available()`` is True when the driver can run here (built, interpreter found);
            an unavailable driver is not collected, unless selected by name (then its tests fail).
        why_unavailable: what to do to make it available (shown when it was selected but is not).
    """

    name: str
    argv: tuple[str, ...]
    cwd: Path = ROOT
    available: Callable[[], bool] = field(default=lambda: True, compare=False)
    why_unavailable: str = ""


def _node_driver_built() -> bool:
    return shutil.which("node") is not None and (ROOT / TS_DRIVER_JS).is_file()


#: The TypeScript SDK's driver, as compiled by its package's build (``npm run build`` in libs/sdk-ts).
TS_DRIVER_JS = "libs/sdk-ts/dist/conformance/driver.js"

DRIVERS: tuple[Driver, ...] = (
    Driver("python", (sys.executable, "tests/conformance/drivers/python_worker.py")),
    Driver(
        "typescript",
        ("node", TS_DRIVER_JS),
        available=_node_driver_built,
        why_unavailable=f"needs node on PATH and {TS_DRIVER_JS} (cd libs/sdk-ts && npm ci && npm run build)",
    ),
)
"""Every driver in the repository."""


def selected(env: dict[str, str] | None = None) -> list[Driver]:
    """The drivers the harness runs (see the module docstring). A name in ``GNOMON_TEST_CONFORMANCE_DRIVERS``
    that is not in :data:`DRIVERS` (nor ``external``) raises ``ValueError``."""
    env = dict(os.environ) if env is None else env
    names = [n.strip() for n in env.get(SELECT_ENV, "").split(",") if n.strip()]
    known = {d.name: d for d in DRIVERS}
    external = env.get(EXTERNAL_ENV, "").strip()
    out: list[Driver] = []
    if names:
        unknown = [n for n in names if n not in known and n != "external"]
        if unknown:
            raise ValueError(
                f"{SELECT_ENV}: unknown driver(s) {unknown}; known: {sorted(known)} and external"
            )
        out = [known[n] for n in names if n in known]
    else:
        out = [d for d in DRIVERS if d.available()]
    if external and (not names or "external" in names):
        out.append(Driver("external", tuple(shlex.split(external)), cwd=Path.cwd()))
    return out
