"""``gnomon auth bootstrap``: the first administrator of a new installation, written straight to the
database (nobody can call the API before a principal exists). Whoever can write the database is
trusted with everything anyway (docs/security.md, "Threat model"); the act is still audited.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import typer

from gnomon.common.auth import keys
from gnomon.common.auth.principals import ALL, Role
from gnomon.common.config import DatabaseSettings
from gnomon.common.names import PRINCIPAL_ID_RE


async def create_admin(database_url: str, principal: str, *, worker: bool) -> str:
    """Makes ``principal`` exist with role admin in ``*`` (and worker on every queue when
    ``worker``), adds a new API key for it and an audit entry (namespace ``*``, action
    ``Bootstrap``), in one transaction; returns the key (``gnk_…``), which is stored only hashed.
    Raises ``sqlalchemy.exc.DBAPIError`` when the database refuses (e.g. not migrated)."""
    # Imported here, not at module level: every ``gnomon`` command (a worker too) loads this module
    # through the CLI, and SQLAlchemy with the storage modules is ~0.27 s of its start-up.
    from gnomon.common.storage import audit, tenancy
    from gnomon.common.storage.engine import make_engine, run_transaction

    key = keys.generate()

    async def tx(conn) -> None:
        await tenancy.ensure_principal(conn, principal, "administrator (gnomon auth bootstrap)")
        await tenancy.add_key(conn, principal, key, "gnomon auth bootstrap")
        await tenancy.grant(conn, principal, ALL, Role.ADMIN)
        if worker:
            await tenancy.grant(conn, principal, ALL, Role.WORKER, [ALL])
        await audit.insert_audit_entry(
            conn,
            namespace=ALL,
            actor=f"database ({os.environ.get('USER', 'unknown')[:64]})",
            action="Bootstrap",
            reason=f"first administrator {principal}, key {key.id}",
            request_id=uuid.uuid4(),
            details={"principal": principal, "key_id": key.id, "worker": worker},
        )

    engine = make_engine(DatabaseSettings(url=database_url), pool_size=1)
    try:
        await run_transaction(engine, tx, max_attempts=3)
    finally:
        await engine.dispose()
    return key.token


def bootstrap(
    database_url: str = typer.Option(..., "--database-url", envvar="GNOMON_DATABASE_URL"),
    principal: str = typer.Option("admin", "--principal", help="Name of the administrator principal."),
    key_file: str = typer.Option(
        "", "--key-file", help="Write the key to this new file (mode 0600) instead of printing it."
    ),
    worker: bool = typer.Option(False, "--worker", help="Also grant the worker role on every queue."),
) -> None:
    """Create the first administrator (admin in every namespace) and an API key for it, directly in
    the database (run `gnomon migrate` first). The key is shown once. Exit 2 for a bad name or an
    existing --key-file."""
    if not PRINCIPAL_ID_RE.fullmatch(principal):
        typer.echo(f"--principal must match {PRINCIPAL_ID_RE.pattern}", err=True)
        raise typer.Exit(2)
    if key_file and os.path.exists(key_file):
        typer.echo(f"--key-file {key_file} exists; not overwritten", err=True)
        raise typer.Exit(2)
    token = asyncio.run(create_admin(database_url, principal, worker=worker))
    if key_file:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        typer.echo(f"principal {principal}: admin in every namespace; its API key is in {key_file}")
    else:
        typer.echo(token)
        typer.echo("this key is shown only once: store it now (it is kept only hashed)", err=True)
