"""Helpers shared by the process-level tests (imported as ``gnomon_test_support``: pytest puts
``tests/`` on ``sys.path`` for its conftest)."""

from __future__ import annotations

import os
import time

import psycopg


def wait_for(cond, timeout_s: float, what: str, interval_s: float = 0.1):
    """Polls ``cond()`` until it returns something truthy (returned) or ``timeout_s`` seconds pass
    (AssertionError naming ``what``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def records(path: str) -> list[list[str]]:
    """The lines a test handler appended to ``path``, split on whitespace ([] if none yet)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def sql(url: str, query: str, *args):
    """Runs one query on the database at ``url`` (a SQLAlchemy URL) and returns all rows."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as c:
        return c.execute(query, args).fetchall()
