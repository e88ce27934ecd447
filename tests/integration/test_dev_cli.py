"""``gnomon dev`` as a new user meets it, with real processes (PostgreSQL, etcd, every service):
a restart on the same ``--data-dir`` reuses it, ``kill -9`` leaves nothing behind, ``gnomon dev
status`` answers as soon as the API serves and lists the servers, a private parent folder as root
is a one-line error, and a missing dev extra is a one-line hint.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnomon.cli.suite import wait_healthy
from gnomon.devservers import free_port
from gnomon.sdk import Client
from gnomon_test_support import wait_for

pytestmark = pytest.mark.integration

GNOMON = [sys.executable, "-m", "gnomon.cli.main"]


@pytest.fixture
def runtime_dir(tmp_path: Path) -> str:
    """A private ``XDG_RUNTIME_DIR``: the registry of running ``gnomon dev`` lives there, not in the
    shared ``~/.gnomon``."""
    d = tmp_path / "run"
    d.mkdir()
    return str(d)


@pytest.fixture(autouse=True)
def client_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private client config file (``GNOMON_CONFIG_FILE``) for this test and the processes it
    starts: ``gnomon dev`` writes its ``dev`` profile there, not into the session's."""
    path = tmp_path / "config" / "config.toml"
    monkeypatch.setenv("GNOMON_CONFIG_FILE", str(path))
    return path


@pytest.fixture
def data_dir() -> Iterator[str]:
    """A fresh ``--data-dir`` directly under the system temp dir: as root, PostgreSQL runs as OS user
    ``postgres``, which cannot enter pytest's private ``tmp_path`` (that case has its own test)."""
    d = tempfile.mkdtemp(prefix="gnomon-test-dev-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _env(runtime_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GNOMON_API"}
    return dict(env, PYTHONUNBUFFERED="1", XDG_RUNTIME_DIR=runtime_dir)


def cli(runtime_dir: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GNOMON, *args], capture_output=True, text=True, timeout=timeout, env=_env(runtime_dir)
    )


class Dev:
    """One ``gnomon dev`` child process with its log file."""

    def __init__(self, data_dir: str, api: str, runtime_dir: str, log_path: Path) -> None:
        self.data_dir, self.api, self.log_path = data_dir, api, log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*GNOMON, "dev", "--data-dir", data_dir, "--api", api],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(runtime_dir),
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> dict:
        """Wait for this process's ``status.json`` (every service serving); return it."""
        path = Path(self.data_dir, "status.json")

        def ready() -> dict | None:
            try:
                st = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return st if st["pid"] == self.proc.pid else None

        wait_for(lambda: self.proc.poll() is not None or ready(), timeout, "gnomon dev ready")
        assert self.proc.poll() is None, self.log()
        st = ready()
        assert st is not None
        return st

    def interrupt(self) -> int:
        """SIGINT, as Ctrl-C does; return the exit code."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` and every live process below them (from ``/proc/*/stat`` parent pids)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, grew = set(roots), True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in out and pid not in out}
        out |= more
        grew = bool(more)
    return out


@pytest.mark.timeout(240)
def test_restart_on_the_same_data_dir_reuses_cluster_and_database(
    data_dir: str, runtime_dir: str, tmp_path: Path
) -> None:
    api = f"127.0.0.1:{free_port()}"
    first = Dev(data_dir, api, runtime_dir, tmp_path / "dev1.log")
    try:
        first.wait_ready()
        with Client(api=api) as c:
            job = c.create_job("restart-check", b"kept", delay=3600)
        key_before = Path(data_dir, "auth", "admin.key").read_text()
        assert first.interrupt() == 0, first.log()
    finally:
        first.close()
    pg_version = Path(data_dir, "pg", "data", "PG_VERSION")
    initialised_at = pg_version.stat().st_mtime_ns

    second = Dev(data_dir, api, runtime_dir, tmp_path / "dev2.log")  # crashed with DuplicateDatabase
    try:
        st = second.wait_ready()
        assert st["state"] == "ready" and st["base_dir"] == data_dir
        assert pg_version.stat().st_mtime_ns == initialised_at  # no second initdb
        with Client(api=api) as c:
            again = c.get_job(job.name)
        assert again.name == job.name and again.queue == "restart-check" and again.payload == b"kept"
        assert "DuplicateDatabase" not in second.log()
        assert Path(data_dir, "auth", "admin.key").read_text() == key_before  # same key, still valid
        assert second.interrupt() == 0, second.log()
    finally:
        second.close()


@pytest.mark.timeout(240)
def test_kill_9_leaves_no_process_and_the_data_dir_restarts(
    data_dir: str, runtime_dir: str, tmp_path: Path
) -> None:
    api = f"127.0.0.1:{free_port()}"
    dev = Dev(data_dir, api, runtime_dir, tmp_path / "dev.log")
    try:
        st = dev.wait_ready()
        services = {p["pid"] for p in st["processes"]}
        servers = {s["pid"] for s in st["servers"]}
        assert {p["role"] for p in st["processes"]} == {"api", "dispatcher", "planner", "reaper", "console"}
        assert {s["role"] for s in st["servers"]} == {"postgres", "etcd"} and None not in servers
        # everything below gnomon dev (services, etcd, the watchdog) and below the postmaster
        # (a daemon: pg_ctl re-parents it to init) with its backends
        started = _descendants({dev.proc.pid} | servers) - {dev.proc.pid}
        assert services | servers <= started and all(_alive(p) for p in started)

        dev.proc.send_signal(signal.SIGKILL)  # no finally, no atexit: only the watchdog is left
        dev.proc.wait()
        wait_for(lambda: not any(_alive(p) for p in started), 10, f"no survivor of {sorted(started)}")

        again = Dev(data_dir, api, runtime_dir, tmp_path / "dev2.log")
        try:
            assert again.wait_ready()["state"] == "ready"
            assert again.interrupt() == 0, again.log()
        finally:
            again.close()
    finally:
        dev.close()


@pytest.mark.timeout(180)
def test_status_answers_once_the_api_serves_and_lists_the_servers(
    data_dir: str, runtime_dir: str, tmp_path: Path
) -> None:
    api = f"127.0.0.1:{free_port()}"
    dev = Dev(data_dir, api, runtime_dir, tmp_path / "dev.log")
    try:
        ca = Path(data_dir, "auth", "ca.pem")  # written before any service starts
        wait_for(lambda: ca.exists() or dev.proc.poll() is not None, 60, "the suite's CA")
        wait_healthy(api, timeout_s=90, ca_file=str(ca))
        out = cli(runtime_dir, "dev", "status", "--api", api, "--json")  # same flag as every command
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        assert st["running"] and st["pid"] == dev.proc.pid and st["api"] == api
        assert st["state"] in ("starting", "ready") and st["base_dir"] == data_dir
        by_role = {s["role"]: s for s in st["servers"]}
        assert set(by_role) == {"postgres", "etcd"}
        assert all(s["alive"] and s["pid"] > 0 for s in st["servers"])
        assert by_role["postgres"]["address"].startswith("127.0.0.1:")
        assert by_role["etcd"]["address"] == st["etcd"][0]
        assert any(p["role"] == "api" and p["address"] == api for p in st["processes"])

        dev.wait_ready()
        text = cli(runtime_dir, "dev", "--api", api, "status")  # the group's --api selects as well
        assert text.returncode == 0, text.stderr
        assert f"running, ready; API {api}" in text.stdout
        for role in ("postgres", "etcd", "api", "dispatcher", "planner", "reaper"):
            assert f"  {role} " in text.stdout
        assert str(by_role["postgres"]["pid"]) in text.stdout and by_role["etcd"]["address"] in text.stdout

        other = cli(runtime_dir, "dev", "status", "--api", "127.0.0.1:1")
        assert other.returncode == 1 and other.stderr.count("\n") == 1 and "127.0.0.1:1" in other.stderr

        assert dev.interrupt() == 0, dev.log()
        gone = cli(runtime_dir, "dev", "status", "--api", api)
        assert gone.returncode == 1
    finally:
        dev.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user only comes into play as root")
def test_private_parent_as_root_is_a_one_line_error(tmp_path: Path, runtime_dir: str) -> None:
    if shutil.which("pg_config") is None and not any(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("no system PostgreSQL (the embedded back end has its own refusal)")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    target = private / "data"
    out = cli(runtime_dir, "dev", "--data-dir", str(target), "--api", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"error: --data-dir {target}: ") and "postgres" in lines[0]
    blocking = lines[0].split("cannot enter ", 1)[1].split(" ", 1)[0]
    assert str(target).startswith(blocking + "/") and "(mode 0700)" in lines[0]
    assert "setfacl" in lines[0] or "choose a data dir" in lines[0]
    assert oct(private.stat().st_mode & 0o777) == "0o700"  # we never open up the user's folder


def test_without_the_dev_extra_gnomon_dev_says_what_to_install(runtime_dir: str) -> None:
    script = (
        "import sys; sys.modules['gnomon.devservers'] = None\n"  # as if gnomon-devservers were absent
        "from gnomon.cli.main import app; app(['dev'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=_env(runtime_dir)
    )
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "error: `gnomon dev` needs the development servers: pip install 'gnomon[dev]' (gnomon-devservers)"
    ]


@pytest.mark.timeout(180)
def test_dev_writes_the_current_profile_and_commands_need_no_flags(
    data_dir: str, runtime_dir: str, tmp_path: Path, client_config: Path
) -> None:
    client_config.parent.mkdir()
    client_config.write_text('current = "prod"\n\n[profiles.prod]\naddress = "gnomon.example:443"\n')
    api = f"127.0.0.1:{free_port()}"
    dev = Dev(data_dir, api, runtime_dir, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        config = tomllib.loads(client_config.read_text())
        auth = Path(data_dir, "auth")
        assert config["current"] == "dev"
        assert config["profiles"]["prod"] == {"address": "gnomon.example:443"}  # merged, not replaced
        assert config["profiles"]["dev"] == {
            "address": api,
            "ca_file": str(auth / "ca.pem"),
            "api_key_file": str(auth / "admin.key"),  # the path: the key itself stays in its 0600 file
        }
        assert "gnk_" not in client_config.read_text()
        assert f"grpcurl -cacert {auth / 'ca.pem'}" in dev.log()

        created = cli(runtime_dir, "job", "create", "--queue", "profile-check", "--in", "1h", "--json")
        assert created.returncode == 0, created.stderr
        name = json.loads(created.stdout)["name"]
        # every service appends its spans to <data dir>/traces.jsonl, printed at start (docs/tracing.md)
        traces = Path(data_dir, "traces.jsonl")
        assert f"traces: {traces}" in dev.log()
        wait_for(
            lambda: (
                traces.exists()
                and any(
                    (span := json.loads(line))["name"] == "gnomon.job.create"
                    and span["attributes"]["gnomon.job"] == name
                    for line in traces.read_text().splitlines()
                )
            ),
            30,
            "the job's create span in traces.jsonl",
        )
        listed = cli(runtime_dir, "job", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert name in listed.stdout
        # the same command with the profile's key replaced by a wrong one is refused
        env_key = dict(_env(runtime_dir), GNOMON_API_KEY="gnk_0123456789abcdef_not-the-key")
        refused = subprocess.run(
            [*GNOMON, "job", "list"], capture_output=True, text=True, timeout=60, env=env_key
        )
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
        # the web console it printed serves the job to whoever signs in with the admin key
        url = wait_for(lambda: re.search(r"Gnomon console on (http://\S+)", dev.log()), 30, "console URL")[1]
        assert f"admin API key in {auth / 'admin.key'}" in dev.log()
        jobs_page = console_sign_in(url, (auth / "admin.key").read_text().strip(), "/jobs")
        assert name.rsplit("/", 1)[1] in jobs_page and "SCHEDULED" in jobs_page
        assert dev.interrupt() == 0, dev.log()
    finally:
        dev.close()


def console_sign_in(url: str, key: str, path: str) -> str:
    """Signs in to the console at ``url`` with ``key`` (its sign-in form, CSRF token and cookies, as a
    browser does) and returns the HTML of ``path``."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{url}/login") as r:
        token = re.search(r'name="csrf" value="([^"]+)"', r.read().decode())[1]  # type: ignore[index]
    form = urllib.parse.urlencode({"csrf": token, "api_key": key, "next": path}).encode()
    with opener.open(f"{url}/login", data=form) as r:
        assert r.url.endswith(path), r.url
        return r.read().decode()
