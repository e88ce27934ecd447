"""Test-only fault injection points, driven by ``GNOMON_FAULTS`` (:class:`FaultSettings`).

``GNOMON_FAULTS=crash_after_claim`` makes a dispatcher SIGKILL itself right after its first claim
transaction commits and before it delivers anything (the kill -9 scenario of the fault tests);
``crash_mid_claim`` inside its first claim transaction that claimed something, before the commit.
Unset in production: :func:`point` is then a dict lookup that does nothing.
"""

from __future__ import annotations

import os
import signal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FaultSettings(BaseSettings):
    """Test-only fault injection points (``GNOMON_FAULTS``; see :mod:`gnomon.common.faults`)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    faults: str = Field(
        default="",
        description="Comma-separated armed fault points (e.g. crash_after_claim); empty in production.",
    )

    @property
    def armed(self) -> frozenset[str]:
        """The armed fault point names."""
        return frozenset(f.strip() for f in self.faults.split(",") if f.strip())


_ARMED = FaultSettings().armed


def point(name: str) -> None:
    """SIGKILLs this process if fault ``name`` is armed."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
