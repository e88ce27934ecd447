"""docs/architecture.md's "Where it happens" table names, for each behaviour, the functions that carry
it out; every named function must exist (imported here), so the table cannot go stale, and every
behaviour the table is for must keep its row."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BEHAVIOURS = [
    "the fenced claim",
    "the outbox relay",
    "lease expiry -> retry",
    "misfire",
    "DST gap",
    "overlap",
    "DLQ replay rate",
    "cancelling a QUEUED job",
    "attempt ownership",
    "quota",
    "audit",
]


def table() -> dict[str, list[str]]:
    """behaviour -> the dotted names in its row's "where" column."""
    text = DOC.read_text()
    section = text.split("## Where it happens\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("behaviour", "---"):
            continue
        rows[cells[0]] = re.findall(r"`([A-Za-z_][\w.]*)`", cells[1])
    return rows


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes. Raises
    ``ImportError``/``AttributeError`` if there is none."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_behaviour_has_its_row():
    assert list(table()) == BEHAVIOURS


def test_every_named_function_exists():
    missing = []
    for behaviour, names in table().items():
        assert names, f"{behaviour}: no function named"
        for name in names:
            try:
                obj = resolve(name)
            except (ImportError, AttributeError) as e:
                missing.append(f"{behaviour}: {name} ({e})")
                continue
            if not callable(obj):
                missing.append(f"{behaviour}: {name} is not a function")
    assert missing == []


def test_a_stale_name_is_caught():
    """The check itself: a name that does not exist does not resolve."""
    for stale in ("gnomon.common.storage.claims.claim_due_fenced", "gnomon.dispatcher.claims.ClaimLoop.gone"):
        try:
            resolve(stale)
        except (ImportError, AttributeError):
            continue
        raise AssertionError(f"{stale} resolved")
