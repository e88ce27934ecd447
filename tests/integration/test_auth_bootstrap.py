"""``gnomon auth bootstrap``: the first administrator of a fresh database, whose key then
authenticates as admin in every namespace; the act is audited; the key is shown once."""

from __future__ import annotations

import asyncio
import os

from sqlalchemy import select
from typer.testing import CliRunner

from gnomon.cli.main import app
from gnomon.common.auth.authenticator import Authenticator
from gnomon.common.auth.principals import ALL, Permission
from gnomon.common.storage.schema import audit_log
from gnomon_test_support import open_engine


async def authenticate(db_url: str, token: str):
    engine = open_engine(db_url)
    try:
        return await Authenticator(engine, cache_s=0).authenticate([("authorization", f"Bearer {token}")], {})
    finally:
        await engine.dispose()


async def audit_rows(db_url: str):
    engine = open_engine(db_url)
    try:
        async with engine.connect() as c:
            return (
                (await c.execute(select(audit_log).where(audit_log.c.action == "Bootstrap"))).mappings().all()
            )
    finally:
        await engine.dispose()


def test_bootstrap_creates_an_admin_whose_key_authenticates(db_url, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["auth", "bootstrap", "--database-url", db_url, "--principal", "root"])
    assert r.exit_code == 0, r.output
    token = r.stdout.strip()
    assert token.startswith("gnk_") and "shown only once" in r.stderr
    principal = asyncio.run(authenticate(db_url, token))
    assert principal.name == "root"
    assert principal.can(Permission.NAMESPACE_ADMIN, ALL) and principal.worker_queues("x") is None
    [row] = asyncio.run(audit_rows(db_url))
    assert row["namespace"] == ALL and token.split("_")[1] in row["reason"] and token not in row["details"]

    key_file = tmp_path / "worker-admin.key"
    r = runner.invoke(
        app,
        [
            "auth",
            "bootstrap",
            "--database-url",
            db_url,
            "--principal",
            "ops",
            "--worker",
            "--key-file",
            str(key_file),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "gnk_" not in r.stdout and oct(os.stat(key_file).st_mode & 0o777) == "0o600"
    ops = asyncio.run(authenticate(db_url, key_file.read_text().strip()))
    assert ops.worker_queues("any") == frozenset({ALL})
    again = runner.invoke(app, ["auth", "bootstrap", "--database-url", db_url, "--key-file", str(key_file)])
    assert again.exit_code == 2 and "not overwritten" in again.stderr
    bad = runner.invoke(app, ["auth", "bootstrap", "--database-url", db_url, "--principal", "a/b"])
    assert bad.exit_code == 2
