"""Small process helpers shared by the servers: run a command, read a log tail, check a pid."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request

from gnomon.devservers.errors import EmbeddedServerError

__all__ = ["OPENER", "clean_env", "log_tail", "pid_alive", "run", "wait_pid_gone"]


def log_tail(path: str | None, max_bytes: int = 4000) -> str:
    """The last ``max_bytes`` bytes of the file at ``path``, decoded (invalid UTF-8 replaced).

    Never raises: a missing path gives ``"(no log)"``, an empty file ``"(log is empty)"``, an
    unreadable one a parenthesised note with the OS error.
    """
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


def clean_env() -> dict[str, str]:
    """This process's environment without ``PG*``/``ETCD*`` variables, which could redirect a child
    (libpq, etcd and etcdctl all read them)."""
    return {k: v for k, v in os.environ.items() if not (k.startswith(("PG", "ETCD")))}


def run(
    cmd: list[str], *, what: str, timeout: float, cwd: str | None = None, log_path: str | None = None
) -> str:
    """Run ``cmd`` to completion and return its stdout+stderr (text).

    Output goes through a temporary file, not a pipe: a daemonising child such as the postmaster must
    not hold our pipe open. ``timeout`` is in seconds. Raises :class:`EmbeddedServerError` naming
    ``what`` on a non-zero exit or a timeout; the message holds the output and the tail of
    ``log_path``.
    """
    with tempfile.TemporaryFile("w+b") as out:
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=clean_env(),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            out.seek(0)
            raise EmbeddedServerError(
                f"{what} timed out after {timeout:g} s: {' '.join(cmd)}\n"
                f"{out.read().decode('utf-8', 'replace')}\n--- log tail ---\n{log_tail(log_path)}"
            ) from None
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise EmbeddedServerError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{text.strip()}\n"
            f"--- log tail ---\n{log_tail(log_path)}"
        )
    return text


def pid_alive(pid: int) -> bool:
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


def wait_pid_gone(pid: int, timeout: float) -> bool:
    """Poll every 20 ms until ``pid`` is gone (see :func:`pid_alive`); False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


#: urllib opener for loopback health checks: never routed through an ``http_proxy`` from the environment.
OPENER: urllib.request.OpenerDirector = urllib.request.build_opener(urllib.request.ProxyHandler({}))
