"""``gnomon worker``: runs a worker process for a handler given as ``module:function``."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from gnomon.cli.common import API, NS, usage
from gnomon.sdk import JobContext


def load_handler(spec: str) -> Any:
    """``"pkg.mod:func"`` -> the function. Raises ``typer.BadParameter`` if it cannot be imported."""
    mod, _, attr = spec.partition(":")
    if not mod or not attr:
        raise typer.BadParameter("use module:function, e.g. myapp.tasks:handle")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise typer.BadParameter(f"cannot load {spec}: {e}") from e


def worker(
    queue: list[str] = typer.Option(..., "--queue", "-q", help="Queue to serve (repeatable)."),
    handler: str = typer.Option(..., "--handler", help="module:function; sync or async, takes a JobContext."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", help="Attempts run at once."),
    api: str | None = API,
    namespace: str | None = NS,
    worker_id: str | None = typer.Option(None, "--worker-id"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print each attempt as it starts and ends."),
) -> None:
    """Run a worker: discovers the dispatchers through the API and serves the queues until SIGTERM.
    Logs at INFO (each dispatcher connection, session ends, draining) unless ``GNOMON_LOG_LEVEL``
    says otherwise."""
    from gnomon.common.event_loop import loop_factory
    from gnomon.common.rpc.runner import configure_logging
    from gnomon.sdk import Worker

    fn = load_handler(handler)
    configure_logging("worker")  # after the handler's module: a logging setup of its own wins

    def on_event(kind: str, ctx: JobContext) -> None:
        if verbose:
            typer.echo(f"{kind:9} {ctx.job} attempt {ctx.attempt}", err=False)

    try:
        w = Worker(
            queues=list(queue),
            handler=fn,
            api=api,
            namespace=namespace,
            concurrency=concurrency,
            worker_id=worker_id,
            on_event=on_event if verbose else None,
        )
    except (ValueError, OSError) as e:
        usage(str(e))
    typer.echo(f"worker serving {', '.join(queue)} via {w.api} (concurrency {concurrency})")
    w.run(loop_factory=loop_factory())  # GNOMON_EVENT_LOOP: uvloop unless set to asyncio
