"""The ``gnomon`` command line (Typer): services, the dev suite, jobs, schedules and workers."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

import typer

from gnomon.cli import auth as auth_cmd
from gnomon.cli import cluster as cluster_cmd
from gnomon.cli import console as console_cmd
from gnomon.cli import dev as dev_cmd
from gnomon.cli import dlq as dlq_cmd
from gnomon.cli import health as health_cmd
from gnomon.cli import jobs as jobs_cmd
from gnomon.cli import queues as queues_cmd
from gnomon.cli import schedules as schedules_cmd
from gnomon.cli import worker as worker_cmd
from gnomon.common.config import ClusterSettings, DatabaseSettings, EtcdSettings, ServerSettings
from gnomon.common.config_check import ConfigError, check_environment, env_name

app = typer.Typer(help="Gnomon: a distributed job scheduler.", no_args_is_help=True, add_completion=False)
app.add_typer(jobs_cmd.app, name="job")
app.add_typer(queues_cmd.app, name="queue")
app.add_typer(dlq_cmd.app, name="dlq")
app.add_typer(schedules_cmd.app, name="schedule")
app.add_typer(dev_cmd.app, name="dev")
app.add_typer(auth_cmd.app, name="auth")
app.command("shards")(cluster_cmd.shards)
app.command("worker")(worker_cmd.worker)
app.command("health")(health_cmd.health)
app.command("console")(console_cmd.console)

DB = typer.Option(
    None,
    "--database-url",
    envvar="GNOMON_DATABASE_URL",
    help="postgresql+psycopg://... or cockroachdb+psycopg://...",
)
ETCD = typer.Option(
    None, "--etcd", envvar="GNOMON_ETCD_ENDPOINTS", help="Comma-separated etcd host:port list."
)
LISTEN = typer.Option(None, "--listen", envvar="GNOMON_LISTEN", help="host:port to serve gRPC on.")
REGION = typer.Option(None, "--region", envvar="GNOMON_REGION", help="Region this process serves.")


def _check_config() -> None:
    """Refuses an unknown ``GNOMON_*`` variable or an invalid value with one line on stderr (exit 2)."""
    try:
        check_environment()
    except ConfigError as e:
        typer.echo(f"gnomon: {e}", err=True)
        raise typer.Exit(2) from None


@app.callback()
def _main() -> None:
    """Checks the configuration before any command runs."""
    _check_config()


def _env(database_url: str | None, etcd: str | None, listen: str | None, region: str | None) -> None:
    """Hands the flags to the service's settings (its ``GNOMON_*`` variables), then re-checks them."""
    for k, v in (
        (env_name(DatabaseSettings, "url"), database_url),
        (env_name(EtcdSettings, "endpoints"), etcd),
        (env_name(ServerSettings, "listen"), listen),
        (env_name(ClusterSettings, "region"), region),
    ):
        if v:
            os.environ[k] = v
    _check_config()


SERVICES = {
    "api": (
        "gnomon.api.service",
        "Run the API service (JobService, ScheduleService, DeadLetterService, QueueService, "
        "ClusterService, NamespaceService, AccessService) "
        "against an external database and etcd.",
    ),
    "dispatcher": (
        "gnomon.dispatcher.service",
        "Run a dispatcher (shard owner, claims, outbox relay, worker lease streams).",
    ),
    "planner": (
        "gnomon.planner.service",
        "Run the planner (recurring schedules: occurrences, misfire, overlap, catch-up budget).",
    ),
    "reaper": (
        "gnomon.reaper.service",
        "Run the reaper (lost leases -> retries, deadlines -> EXPIRED, retention pruning).",
    ),
}


def _service_command(module: str) -> Callable[..., None]:
    def command(
        database_url: str | None = DB,
        etcd: str | None = ETCD,
        listen: str | None = LISTEN,
        region: str | None = REGION,
    ) -> None:
        from gnomon.common.rpc.server import InsecureRefused

        _env(database_url, etcd, listen, region)
        try:
            importlib.import_module(module).main()
        except InsecureRefused as e:  # a refusal by configuration: one line, no traceback
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return command


for _role, (_module, _help) in SERVICES.items():
    app.command(_role, help=_help)(_service_command(_module))


@app.command()
def migrate(database_url: str = typer.Option(..., "--database-url", envvar="GNOMON_DATABASE_URL")) -> None:
    """Apply the schema migrations to the database (idempotent)."""
    from gnomon.common.storage.migrations import upgrade

    upgrade(database_url)
    typer.echo("schema is at head")


if __name__ == "__main__":
    app()
