"""The planner service (``gnomon planner``): ``service.py`` (lifecycle and construction),
``servicer.py`` (the internal WakePlanner hint), ``planning.py`` (the engine: planning steps and
releases of buffered occurrences, over :mod:`gnomon.common.scheduling`)."""
