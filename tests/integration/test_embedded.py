"""The embedded servers themselves: real PostgreSQL and etcd, checked with real values."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid

import psycopg
import pytest
import sqlalchemy as sa

from gnomon.devservers import EtcdCluster, PostgresServer, etcd_binary_dir, free_port

pytestmark = pytest.mark.integration

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _gw(endpoint: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://{endpoint}/v3/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _OPENER.open(req, timeout=5) as r:
        return json.loads(r.read())


def kv_put(endpoint: str, key: bytes, value: bytes) -> int:
    """Put through the HTTP/JSON gateway; returns the new cluster revision."""
    out = _gw(
        endpoint, "kv/put", {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}
    )
    return int(out["header"]["revision"])


def kv_get(endpoint: str, key: bytes) -> bytes | None:
    """Linearizable get through the HTTP/JSON gateway."""
    out = _gw(endpoint, "kv/range", {"key": base64.b64encode(key).decode()})
    kvs = out.get("kvs", [])
    return base64.b64decode(kvs[0]["value"]) if kvs else None


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_free_port_is_bindable_and_distinct() -> None:
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))


def test_postgres_accepts_connections(pg_server: PostgresServer) -> None:
    assert pg_server.url == f"postgresql+psycopg://app@127.0.0.1:{pg_server.port}/postgres"
    assert pg_server.database_url("x") == f"postgresql+psycopg://app@127.0.0.1:{pg_server.port}/x"
    with psycopg.connect(pg_server.conninfo()) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        settings: dict[str, str] = dict(
            conn.execute(
                "select name, setting from pg_settings where name in "
                "('max_connections','fsync','synchronous_commit','full_page_writes','listen_addresses')"
            ).fetchall()
        )
    assert settings == {
        "max_connections": "300",
        "fsync": "off",
        "synchronous_commit": "on",
        "full_page_writes": "off",
        "listen_addresses": "127.0.0.1",
    }
    engine = sa.create_engine(pg_server.url)
    try:
        with engine.connect() as conn:
            assert conn.scalar(sa.text("select 1")) == 1
            assert conn.scalar(sa.text("select current_user")) == "app"
    finally:
        engine.dispose()
    assert isinstance(pg_server.pid, int) and _alive(pg_server.pid)


def test_create_database_from_template_copies_table(pg_server: PostgresServer) -> None:
    src, dst = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    src_url = pg_server.create_database(src)
    assert src_url == pg_server.database_url(src)
    with psycopg.connect(pg_server.conninfo(src), autocommit=True) as conn:
        conn.execute("create table jobs (id int primary key, name text not null)")
        conn.execute("insert into jobs values (1, 'alpha'), (2, 'beta')")
    try:
        dst_url = pg_server.create_database(dst, template=src)
        engine = sa.create_engine(dst_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("select id, name from jobs order by id")).all()
            assert [tuple(r) for r in rows] == [(1, "alpha"), (2, "beta")]
        finally:
            engine.dispose()
        with psycopg.connect(pg_server.conninfo(dst)) as held:  # FORCE drops despite this open session
            pg_server.drop_database(dst)
            with pytest.raises(psycopg.OperationalError):
                held.execute("select 1")
    finally:
        pg_server.drop_database(src)
        pg_server.drop_database(dst)
    with psycopg.connect(pg_server.conninfo()) as conn:
        left = conn.execute(
            "select count(*) from pg_database where datname in (%s, %s)", (src, dst)
        ).fetchone()
    assert left == (0,)


def test_restart_keeps_data_and_port() -> None:
    with PostgresServer(durable=True) as pg:
        port, pid, base = pg.port, pg.pid, pg.base_dir
        assert pid is not None and base is not None
        with psycopg.connect(pg.conninfo(), autocommit=True) as conn:
            assert conn.execute("show fsync").fetchone() == ("on",)
            conn.execute("create table t (v int)")
            conn.execute("insert into t values (42)")
        pg.restart()  # immediate: a crash + recovery
        assert pg.port == port
        assert pg.pid != pid
        _wait(lambda: not _alive(pid), 5, "old postmaster still alive after restart")
        with psycopg.connect(pg.conninfo()) as conn:
            assert conn.execute("select v from t").fetchall() == [(42,)]
            assert conn.execute("show port").fetchone() == (str(port),)
        pg.restart("fast")
        with psycopg.connect(pg.conninfo()) as conn:
            assert conn.execute("select count(*) from t").fetchone() == (1,)
        final_pid = pg.pid
        assert final_pid is not None
    assert not os.path.exists(base)
    _wait(lambda: not _alive(final_pid), 5, "postmaster alive after stop")


def test_etcd_session_cluster_and_prefix(etcd_endpoints: list[str], etcd_prefix: bytes) -> None:
    assert len(etcd_endpoints) == 1 and etcd_endpoints[0].startswith("127.0.0.1:")
    assert etcd_prefix.startswith(b"/gnomon-test-") and etcd_prefix.endswith(b"/")
    rev = kv_put(etcd_endpoints[0], etcd_prefix + b"k", b"v1")
    assert rev >= 2
    assert kv_get(etcd_endpoints[0], etcd_prefix + b"k") == b"v1"


def test_etcd_three_members_survive_member_loss() -> None:
    with EtcdCluster(3) as cluster:
        eps = cluster.endpoints
        assert len(set(eps)) == 3 and all(m.is_healthy() for m in cluster.members)
        r1 = kv_put(eps[0], b"/k/a", b"1")

        cluster.kill_member(0)
        assert cluster.pids[0] is None
        cluster.wait_healthy(10)  # members 1 and 2 have a leader (member 0 may have been it)
        r2 = kv_put(eps[1], b"/k/b", b"2")  # quorum 2/3 still commits
        assert r2 > r1
        assert kv_get(eps[2], b"/k/a") == b"1" and kv_get(eps[2], b"/k/b") == b"2"

        # etcdctl from the same distribution agrees (ETCDCTL_API=3)
        assert cluster.etcdctl("get", "/k/b", "--print-value-only", endpoints=[eps[2]]).strip() == "2"
        assert os.access(os.path.join(etcd_binary_dir(), "etcdctl"), os.X_OK)

        cluster.restart_member(0)
        assert cluster.members[0].is_healthy()
        assert kv_get(eps[0], b"/k/b") == b"2"  # caught up with what it missed

        cluster.pause_member(2)
        cluster.wait_healthy(10)  # members 0 and 1 have a leader (member 2 may have been it)
        assert kv_put(eps[0], b"/k/c", b"3") > r2
        assert not cluster.members[2].is_healthy(timeout=0.2)
        cluster.resume_member(2)
        cluster.wait_healthy(10)
        assert kv_get(eps[2], b"/k/c") == b"3"
        pids, base = cluster.pids, cluster.base_dir
        assert base is not None
    assert not any(_alive(p) for p in pids if p)
    assert not os.path.exists(base)


def test_servers_do_not_outlive_a_killed_parent() -> None:
    script = textwrap.dedent("""
        import json, sys, time
        from gnomon.devservers import EtcdCluster, PostgresServer
        pg = PostgresServer().start()
        etcd = EtcdCluster(1).start()
        print(json.dumps({"pg_pid": pg.pid, "pg_dir": pg.base_dir,
                          "etcd_pid": etcd.pids[0], "etcd_dir": etcd.base_dir}), flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        info = json.loads(proc.stdout.readline())
        assert _alive(info["pg_pid"]) and _alive(info["etcd_pid"])
    finally:
        proc.send_signal(signal.SIGKILL)  # no atexit, no finally: only the watchdog can clean up
        proc.wait()
        proc.stdout.close()  # an unclosed pipe is a ResourceWarning, an error under -W error
    _wait(lambda: not _alive(info["etcd_pid"]), 10, "etcd outlived its parent")
    _wait(lambda: not _alive(info["pg_pid"]), 10, "postgres outlived its parent")
    _wait(
        lambda: not os.path.exists(info["pg_dir"]) and not os.path.exists(info["etcd_dir"]),
        10,
        "temp dirs left behind",
    )


def _ports(base: str) -> list[list[int]]:
    with open(os.path.join(base, "cluster.json")) as f:
        return json.load(f)["ports"]


def test_etcd_restart_in_base_dir_keeps_data_even_when_a_recorded_port_was_taken(tmp_path) -> None:
    base = str(tmp_path / "etcd")
    with EtcdCluster(1, base) as first:
        first.etcdctl("put", "/kept", "v1")
        old_ports = _ports(base)
    with EtcdCluster(1, base) as same:  # `gnomon dev --data-dir D` the second time
        assert _ports(base) == old_ports
        assert same.etcdctl("get", "/kept", "--print-value-only").strip() == "v1"
    import socket

    with socket.socket() as squatter:  # another program took the member's recorded peer port
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", old_ports[0][1]))
        squatter.listen()
        with EtcdCluster(1, base) as moved:
            new_ports = _ports(base)
            assert new_ports != old_ports and moved.endpoints == [f"127.0.0.1:{new_ports[0][0]}"]
            assert moved.etcdctl("get", "/kept", "--print-value-only").strip() == "v1"
            moved.etcdctl("put", "/after", "v2")
    with EtcdCluster(1, base) as again:  # and it restarts normally on the new ports
        assert again.etcdctl("get", "/after", "--print-value-only").strip() == "v2"
