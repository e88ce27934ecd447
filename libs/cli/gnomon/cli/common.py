"""What every ``gnomon`` client command shares: the ``--api``/``--namespace``/``--json`` options, and
how errors end a command (a server error exits 1 with its status, reason and field violations; a
usage error exits 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer

from gnomon.sdk import Client, GnomonError

__all__ = ["API", "NS", "JSON", "fail", "server_fail", "usage", "run", "print_pages"]

T = TypeVar("T")

API = typer.Option(
    None,
    "--api",
    help="host:port of the Gnomon API [default: GNOMON_API, else the profile's address, else 127.0.0.1:7070].",
    show_default=False,
)
NS = typer.Option(
    None,
    "--namespace",
    "-n",
    help="Namespace (tenant) [default: GNOMON_NAMESPACE, else the profile's, else default].",
    show_default=False,
)
JSON = typer.Option(False, "--json", help="Print JSON.")


def fail(err: GnomonError) -> NoReturn:
    """Prints a server error (status, message or field violations) to stderr and exits 1."""
    code = getattr(err.code, "name", "ERROR")
    if err.field_violations:
        typer.echo(f"error: {code}: invalid request", err=True)
        for field, desc in err.field_violations:
            typer.echo(f"  {field}: {desc}", err=True)
    else:
        typer.echo(f"error: {code}: {err.message}", err=True)
    raise typer.Exit(1)


def server_fail(err: GnomonError) -> NoReturn:
    """:func:`fail` (exit 1), followed by the ``ErrorInfo`` reason (e.g. RULE_NEVER_FIRES,
    INVALID_TIME_ZONE) when the server sent one other than the status name."""
    try:
        fail(err)
    finally:
        if err.reason and err.reason != getattr(err.code, "name", None):
            typer.echo(f"  reason: {err.reason}", err=True)


def usage(msg: str) -> NoReturn:
    """Prints ``error: msg`` to stderr and exits 2 (a usage error: nothing was sent)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def run(
    api: str | None,
    namespace: str | None,
    fn: Callable[[Client], T],
    *,
    reason: bool = True,
    metadata: list[tuple[str, str]] | None = None,
) -> T:
    """Calls ``fn(client)`` with a fresh :class:`~gnomon.sdk.Client` (sending ``metadata``; address,
    namespace, TLS and API key resolved by :mod:`gnomon.sdk.connection` where ``api``/``namespace``
    are None); a server error goes to :func:`server_fail` (or :func:`fail` when not ``reason``; exit
    1), a local ``ValueError``/``TypeError`` (e.g. an unusable profile) to :func:`usage` (exit 2), an
    unreadable credential file exits 2 too."""
    try:
        client = Client(api=api, namespace=namespace, metadata=metadata)
    except (ValueError, OSError) as e:
        usage(f"connection settings: {e}")
    with client as c:
        try:
            return fn(c)
        except GnomonError as e:
            (server_fail if reason else fail)(e)
        except (ValueError, TypeError) as e:
            usage(str(e))


def print_pages(
    fetch: Callable[[str], tuple[list[T], str]], token: str, all_pages: bool, show: Callable[[T], None]
) -> None:
    """Prints a listing a page at a time: ``fetch(page_token)`` -> ``(items, next_token)`` from
    ``token`` on, ``show(item)`` for each item; follows the tokens to the end when ``all_pages``, else
    stops after one page and prints ``next page: --page-token T`` to stderr when there is more."""
    while True:
        items, token = fetch(token)
        for item in items:
            show(item)
        if not token or not all_pages:
            break
    if token:
        typer.echo(f"next page: --page-token {token}", err=True)
    sys.stdout.flush()
