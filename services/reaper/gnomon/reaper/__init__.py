"""The reaper service (``gnomon reaper``): ``service.py`` (lifecycle and construction; a health-only
gRPC server) and ``sweeps.py`` (the engine: lost leases, deadlines, retention)."""
