"""The watchdog: whatever a process started here is undone when that process dies, however it dies.

How it works
  The first registration starts one small helper process per parent process (``python -I -S -c``,
  in its own session, so a Ctrl-C aimed at the parent's terminal does not reach it). The helper
  blocks reading a pipe whose only write end is held by the parent (the pipe is close-on-exec, and
  a child made by ``os.fork`` closes its copy at once, see :meth:`Watchdog._after_fork_in_child`).
  The parent sends one JSON line per registration (:meth:`Watchdog.add`) and per removal
  (:meth:`Watchdog.remove`). When the parent dies for any reason (SIGKILL, ``os._exit``, a crash)
  the kernel closes the pipe, the helper reads EOF and, for every entry still registered:

  1. sends SIGKILL to each registered pid's process group, else to the pid
     (servers and services are started in their own session, so pid == process group id),
  2. runs each registered command (e.g. ``pg_ctl stop -m immediate``: the postmaster is a daemon,
     not our child, and is stopped through its own control tool), 30 s at most each,
  3. removes the registered temporary directories.

Why a pipe and not a pid poll or ``PR_SET_PDEATHSIG``: EOF on the pipe is delivered by the kernel the
moment the last holder exits, with no polling interval and no pid-reuse race, and it works for
processes that are not our children (the postmaster, re-parented to init). ``PR_SET_PDEATHSIG`` fires
when the *thread* that forked the child exits (a fixture thread would kill its servers) and cannot
reach daemons. A parent that exits normally closes the pipe from an :mod:`atexit` hook after stopping
what it still tracks (:func:`track`), so the helper then finds nothing left to do.

Pid reuse: each registered pid is stored with its start time (``/proc/<pid>/stat``); a pid whose
start time no longer matches was reused by an unrelated process and is left alone, and a plain
``kill`` (not ``killpg``) is only sent to a pid that still exists. Owners also
:meth:`~Watchdog.remove` a key as soon as they reap its process.

Limits: a helper killed on purpose cannot clean up; the commands run as whoever the parent was.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
from typing import Any, Protocol

__all__ = ["Stoppable", "Watchdog", "track", "untrack"]

log = logging.getLogger(__name__)

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
def start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
# EOF: the parent closed the pipe or died. Undo whatever is still registered.
for e in entries.values():
    for item in e.get("kill", []):
        pid, started = item if isinstance(item, list) else (item, None)
        now = start_time(pid)
        if now is not None and started is not None and now != started:
            continue  # the pid was reused by an unrelated process: leave it alone
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            if now is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
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


def _start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class Watchdog:
    """Parent side of the watchdog (see the module docstring): one pipe to one helper process,
    started lazily on the first :meth:`add`. All methods are class methods and thread-safe."""

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
        """Register (or replace) entry ``key``: if this process dies, SIGKILL the process groups (or
        processes) of the pids ``kill`` (skipped if a pid was reused meanwhile), run the argv lists
        ``cmds``, then delete the directories ``rmtree``.

        Starts the helper on first use, and a new one (told every entry again) if it died.
        """
        msg = {
            "op": "add",
            "key": key,
            "kill": [[pid, _start_time(pid)] for pid in kill or []],
            "cmds": cmds or [],
            "rmtree": rmtree or [],
        }
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
        """Forget entry ``key`` (its processes were stopped and reaped by their owner). No-op if unknown."""
        with cls._lock:
            if cls._entries.pop(key, None) is None or cls._proc is None:
                return
            try:
                cls._send(cls._proc, {"op": "del", "key": key})
            except OSError:
                cls._proc = None

    @classmethod
    def close(cls) -> None:
        """Close the pipe: the helper undoes whatever is still registered, then exits; waits for it
        (up to 10 s if entries were left, else 2 s)."""
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


class Stoppable(Protocol):
    """Anything :func:`track` can stop at exit: a server with an idempotent ``stop()``."""

    def stop(self) -> None:
        """Stop and release everything; safe to call twice."""


# Servers started by this process and not yet stopped, stopped by the atexit hook (LIFO).
_live: dict[int, Stoppable] = {}


def track(server: Stoppable) -> None:
    """Stop ``server`` from the :mod:`atexit` hook if it is still tracked when this process exits."""
    _live[id(server)] = server


def untrack(server: Stoppable) -> None:
    """Undo :func:`track` (the server was stopped). No-op if not tracked."""
    _live.pop(id(server), None)


def _stop_all_at_exit() -> None:
    for server in reversed(list(_live.values())):
        try:
            server.stop()
        except Exception:
            log.exception("stopping %r at exit failed", server)
    Watchdog.close()


atexit.register(_stop_all_at_exit)
os.register_at_fork(after_in_child=Watchdog._after_fork_in_child)
