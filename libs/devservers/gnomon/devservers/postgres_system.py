"""The system PostgreSQL back end: the machine's ``initdb``/``pg_ctl``/``postgres`` (e.g. Debian's
PostgreSQL 15), run as OS user ``postgres`` when we are root (initdb refuses root)."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile

from gnomon.devservers.errors import DataDirNotReachableError, EmbeddedServerError
from gnomon.devservers.ports import HOST, free_port
from gnomon.devservers.postgres_base import PG_USER, PostgresBase, conf_value
from gnomon.devservers.process import run

__all__ = [
    "SystemBackend",
    "check_reachable_as",
    "find_system_pg_bindir",
    "temp_root",
]

log = logging.getLogger(__name__)


def find_system_pg_bindir() -> str | None:
    """The bin dir of a system PostgreSQL that has ``initdb``, ``pg_ctl`` and ``postgres``, or None.

    Tries ``pg_config --bindir``, then the highest ``/usr/lib/postgresql/<version>/bin``, then the
    directory of ``initdb`` on ``PATH``.
    """

    def ok(d: str | None) -> bool:
        return (
            d is not None
            and d != ""
            and all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres"))
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


def temp_root(in_memory: bool, override: str = "") -> str:
    """Parent directory (absolute path) for temporary server directories.

    ``override`` if not empty (``GNOMON_EMBEDDED_TMPDIR``, passed by the caller); else, for non-durable servers (``in_memory``), ``/dev/shm``
    when it is a writable tmpfs with at least 1 GiB free (a cold PostgreSQL start there is ~0.3 s
    instead of ~1-2 s on this machine's disk; Docker's default 64 MB /dev/shm is skipped); else the
    system temp dir.
    """
    if override:
        return override
    if in_memory and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        try:
            st = os.statvfs("/dev/shm")
            if st.f_bavail * st.f_frsize >= 1 << 30:
                return "/dev/shm"
        except OSError:
            pass
    return tempfile.gettempdir()


def check_reachable_as(os_user: str, path: str) -> None:
    """Raise :class:`DataDirNotReachableError` unless OS user ``os_user`` can enter directory ``path``
    (search permission on it and on every ancestor, ACLs included: checked by running ``test -x`` as
    that user through ``runuser``). Needs root. The error names the first ancestor that blocks."""
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"

    def can_enter(d: str) -> bool:
        cmd = [runuser, "-u", os_user, "--", "test", "-x", d]
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, check=False).returncode == 0

    path = os.path.abspath(path)
    if can_enter(path):
        return
    chain, d = [], path
    while True:
        chain.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    blocking = next((a for a in reversed(chain) if not can_enter(a)), path)
    try:
        mode = f"mode {os.stat(blocking).st_mode & 0o7777:04o}"
    except OSError:
        mode = "not accessible"
    raise DataDirNotReachableError(
        f"PostgreSQL runs as OS user {os_user!r} (initdb refuses root) and cannot enter {blocking} "
        f"({mode}): choose a data dir that user can reach (e.g. under /var/tmp), or let it pass with "
        f"`setfacl -m u:{os_user}:x {blocking}` or `chmod o+x {blocking}`",
        path=path,
        blocking=blocking,
        os_user=os_user,
    )


def _initdb_cache_path(bindir: str, os_user: str | None, args: list[str], enabled: bool) -> str | None:
    """Where a pristine initdb result for this binary/user/arguments is cached, or None if not
    ``enabled`` (``GNOMON_PG_INITDB_CACHE=false``). initdb is ~0.8 s (several s on a busy box); a
    copy ~0.1 s."""
    if not enabled:
        return None
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
    cmd = ["cp", "-a", src, dst]
    if subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, check=False).returncode == 0:
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


class SystemBackend(PostgresBase):
    """``initdb -U app --auth=trust -E UTF8 --no-locale --no-sync`` (or a copy of a cached result)
    and ``pg_ctl -w start``; settings in ``<data>/gnomon.conf``, rewritten on every start."""

    def _start_system(self, bindir: str) -> None:
        """Initialise ``<base_dir>/data`` unless it holds a cluster, then start it on a free port.

        Raises :class:`DataDirNotReachableError` (as root, before touching anything) if OS user
        ``postgres`` cannot enter the base dir's parent, and :class:`EmbeddedServerError` if
        initdb or pg_ctl fail.
        """
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
            check_reachable_as("postgres", os.path.dirname(self.base_dir))
            self._os_user = "postgres"
            os.chown(self.base_dir, pw.pw_uid, pw.pw_gid)
        # Unix socket next to the data unless the path would be too long for sun_path (107 bytes).
        self.socket_dir = self.base_dir if len(self.base_dir) + len("/.s.PGSQL.65535") < 100 else None

        if not os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            self._initdb(bindir)

        self._register_reaper()  # from here on, a dying parent must stop the server
        last_error: EmbeddedServerError | None = None
        for _attempt in range(3):
            self.port = free_port()
            self._write_conf()
            try:
                assert self.log_path
                self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "start"], what="pg_ctl start")
                return
            except EmbeddedServerError as e:
                last_error = e
                if "already in use" not in str(e):  # only a lost port race is worth another try
                    raise
                log.warning("port %s was taken before PostgreSQL bound it; retrying", self.port)
        assert last_error is not None
        raise last_error

    def _initdb(self, bindir: str) -> None:
        assert self.base_dir and self.data_dir
        initdb = [
            os.path.join(bindir, "initdb"),
            *("-D", self.data_dir, "-U", PG_USER, "--auth=trust", "-E", "UTF8"),
            *("--no-locale", "--no-sync", "--no-instructions"),
        ]
        cache = _initdb_cache_path(bindir, self._os_user, initdb[3:], self.pg_initdb_cache)
        if cache is None or not _copy_tree(cache, self.data_dir):
            try:
                run(self._as_os_user(initdb), what="initdb", timeout=120, cwd=self.base_dir)
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
                "\n# gnomon.devservers: per-start settings (port, durability)\ninclude_if_exists = 'gnomon.conf'\n"
            )

    def _write_conf(self) -> None:
        """Write ``<data>/gnomon.conf`` (address, port, socket dir, settings), owned like the data dir."""
        assert self.data_dir
        s: dict[str, object] = {
            "listen_addresses": HOST,
            "port": self.port,
            "unix_socket_directories": self.socket_dir or "",
        }
        s.update(self._server_settings())
        path = os.path.join(self.data_dir, "gnomon.conf")
        with open(path, "w") as f:
            f.write("# written by gnomon.devservers on every start\n")
            for k, v in s.items():
                f.write(f"{k} = {conf_value(v)}\n")
        st = os.stat(self.data_dir)
        if os.geteuid() == 0:
            os.chown(path, st.st_uid, st.st_gid)
