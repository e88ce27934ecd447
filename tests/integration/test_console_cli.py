"""``gnomon console`` as a command: HTTPS on its own listener with ``Secure`` cookies, and one-line
usage errors. (The pages themselves: test_console_browser.py.)"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import urllib.request

import pytest

from gnomon.cli.console import spawn
from gnomon.cli.suite import Suite
from gnomon.devservers import free_port
from gnomon_test_support import wait_for

GNOMON = [sys.executable, "-m", "gnomon.cli.main"]


def test_the_console_serves_https_with_secure_cookies_when_given_a_certificate(session_credentials, tmp_path):
    creds = session_credentials
    listen = f"127.0.0.1:{free_port()}"
    with open(tmp_path / "console.log", "wb") as log:
        proc = subprocess.Popen(
            [*GNOMON, "console", "--listen", listen, "--api", f"127.0.0.1:{free_port()}"]
            + ["--tls-cert-file", creds.cert_file, "--tls-key-file", creds.key_file],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        tls = ssl.create_default_context(cafile=creds.ca_file)

        def login_page():
            try:
                return urllib.request.urlopen(f"https://{listen}/login", context=tls, timeout=2)
            except OSError:
                assert proc.poll() is None, (tmp_path / "console.log").read_text()
                return None

        with wait_for(login_page, 30, "the console over HTTPS") as r:
            body = r.read().decode()
            cookies = r.headers.get_all("set-cookie")
        assert 'name="api_key"' in body
        assert cookies and all("Secure" in c and "HttpOnly" in c and "SameSite=strict" in c for c in cookies)
        assert "script-src 'self'" in r.headers["content-security-policy"]
        with pytest.raises(OSError):  # plain HTTP is not served on that port (the TLS listener hangs up)
            urllib.request.urlopen(f"http://{listen}/login", timeout=2)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "nohostport"], "--listen needs host:port"),
        (["--tls-cert-file", "/nonexistent.pem"], "--tls-cert-file and --tls-key-file go together"),
    ],
    ids=["listen", "half-tls"],
)
def test_usage_errors_are_one_line_and_exit_2(args, message):
    out = subprocess.run([*GNOMON, "console", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


class _NoApi(Suite):
    """A suite whose API is never started: the console's own start-up needs none."""

    @property
    def api_address(self) -> str:
        return "127.0.0.1:1"

    def client_env(self) -> dict[str, str]:
        return {"GNOMON_INSECURE": "true"}


def test_spawn_takes_a_free_port_when_the_asked_one_is_taken_and_says_so_otherwise(tmp_path):
    suite = _NoApi()
    suite.log_dir = str(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        try:
            p = spawn(suite, taken, fallback=True)
            assert p.address != taken and p.popen.poll() is None
            with urllib.request.urlopen(f"http://{p.address}/healthz", timeout=5) as r:
                assert r.read().decode() == f"ok {p.popen.pid}"
            with pytest.raises(TimeoutError, match="did not come up"):
                spawn(suite, taken, timeout_s=20)  # no fallback: the bind error, from its log
            assert [q.role for q in suite.procs] == ["console"]  # the failed one is stopped and forgotten
        finally:
            suite.stop()
