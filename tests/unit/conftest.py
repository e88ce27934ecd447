"""Fixtures of the unit tests (no servers)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def env(monkeypatch):
    """A clean slate: no ``GNOMON_*`` variable from the caller's environment."""
    for k in list(os.environ):
        if k.upper().startswith("GNOMON_"):
            monkeypatch.delenv(k)
    return monkeypatch
