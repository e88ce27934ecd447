"""Test-only fault injection points, driven by ``GNOMON_FAULTS`` (:class:`~gnomon.common.config.FaultSettings`).

``GNOMON_FAULTS=crash_after_claim`` makes a dispatcher SIGKILL itself right after its first claim
transaction commits and before it delivers anything (the kill -9 scenario of the fault tests);
``crash_mid_claim`` inside its first claim transaction that claimed something, before the commit.
Unset in production: :func:`point` is then a dict lookup that does nothing.
"""

from __future__ import annotations

import os
import signal

from gnomon.common.config import FaultSettings

_ARMED = FaultSettings().armed


def point(name: str) -> None:
    """SIGKILLs this process if fault ``name`` is armed."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
