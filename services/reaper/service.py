"""The reaper service. Lease expiry, deadlines and pruning (issue 4) are not built yet: the process
serves health and reflection so deployments and ``gnomon dev`` already have their final shape."""
from __future__ import annotations

from gnomon.common.rpc import idle


def main() -> None:
    """Entry point of ``gnomon reaper``."""
    idle.main("reaper")
