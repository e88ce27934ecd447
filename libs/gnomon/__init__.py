"""Gnomon: a distributed job scheduler.

Import names map onto the tree (see setup.py): ``gnomon.api``, ``gnomon.planner``,
``gnomon.dispatcher``, ``gnomon.reaper`` (services/), ``gnomon.common``, ``gnomon.sdk``,
``gnomon.cli`` (libs/) and the generated ``gnomon._proto``.
"""

__version__ = "0.1.0"
