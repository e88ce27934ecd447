"""The API service (``gnomon api``), in the skeleton every service shares:

* ``service.py``: lifecycle (start, drain, stop; :mod:`gnomon.common.rpc.lifecycle`) and construction;
* thin gRPC adapters (validate, convert, one engine call): ``servicer.py`` (JobService,
  ClusterService), ``schedule_servicer.py``, ``dead_letter_servicer.py``, ``queue_servicer.py``;
* engines, no gRPC: ``jobs.py`` (jobs), :mod:`gnomon.common.scheduling.engine` (schedules, shared with
  the planner), the storage modules (dead letters, queues);
* conversion: ``validation.py`` and ``schedule_validation.py`` (requests -> domain values, every rule
  a field violation), ``convert.py`` (rows -> messages).

Authentication and namespace checks are one seam for every server: :mod:`gnomon.common.rpc.auth`.
"""
