"""The dispatcher service (``gnomon dispatcher``): ``service.py`` (lifecycle and construction),
``servicer.py`` (the worker lease stream and the WakeDispatcher hint), and the engines:
``region.py`` (one region's claim path, built the same for the home region and a standby),
``shards.py``, ``claims.py``, ``relay.py``, ``budget.py``, ``breaker.py``, ``rate_limits.py``,
``writes.py``, ``cancels.py``, ``sessions.py``, ``failover.py``."""
