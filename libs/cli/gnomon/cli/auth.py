"""``gnomon auth``: namespaces (settings and quotas), principals, API keys and role grants through
the public API (``NamespaceService``, ``AccessService``), and ``whoami``.

    gnomon auth namespace create|get|list|update|delete
    gnomon auth principal create|get|list|disable
    gnomon auth key create|list|revoke
    gnomon auth grant add|remove|list
    gnomon auth whoami
    gnomon auth bootstrap --database-url URL   (the first administrator, straight to the database)

Server errors exit 1 with the status and reason; bad arguments exit 2 (:mod:`gnomon.cli.common`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import typer

from gnomon.cli.auth_bootstrap import bootstrap
from gnomon.cli.common import API, run, usage
from gnomon.cli.durations import parse_duration, parse_instant
from gnomon.cli.render import fields, table
from gnomon.sdk import ApiKey, Grant, Namespace, NamespaceQuotas, Principal

app = typer.Typer(help="Manage namespaces, principals, API keys and grants.", no_args_is_help=True)
namespace_app = typer.Typer(help="Namespaces: description, retention and quotas.", no_args_is_help=True)
principal_app = typer.Typer(help="Principals: who calls Gnomon.", no_args_is_help=True)
key_app = typer.Typer(help="API keys of a principal.", no_args_is_help=True)
grant_app = typer.Typer(help="Roles of principals in namespaces.", no_args_is_help=True)
app.add_typer(namespace_app, name="namespace")
app.add_typer(principal_app, name="principal")
app.add_typer(key_app, name="key")
app.add_typer(grant_app, name="grant")
app.command("bootstrap")(bootstrap)

JSON_OUT = typer.Option(False, "--json", help="Print as JSON.")
DESCRIPTION = typer.Option(None, "--description", help="Free text (at most 1024 characters).")
RETENTION = typer.Option(
    None, "--retention", help="How long finished jobs are kept (e.g. 7d, 12h; 0 = the cluster default)."
)
ETAG = typer.Option("", "--etag", help="Act only if the namespace is still at this etag.")
RATE = typer.Option(None, "--max-create-rate", help="Jobs created per second per API server (0 = no limit).")
PENDING = typer.Option(None, "--max-pending-jobs", help="Jobs SCHEDULED or QUEUED at once (0 = no limit).")
SCHEDULES = typer.Option(None, "--max-schedules", help="Schedules at once (0 = no limit).")
STREAMS = typer.Option(
    None, "--max-worker-streams", help="Worker streams per dispatcher at once (0 = the default, 256)."
)
QUEUES = typer.Option(
    None, "--max-queues-per-hello", help="Queues one worker stream may name (0 = the default, 64)."
)
P_STREAMS = typer.Option(
    None,
    "--max-worker-streams-per-principal",
    help="Worker streams of one principal per dispatcher at once (0 = the default, 64).",
)
P_QUEUES = typer.Option(
    None,
    "--max-queues-per-principal",
    help="Distinct queues one principal's streams serve per dispatcher (0 = the default, 64).",
)
NS_QUEUES = typer.Option(
    None,
    "--max-streamed-queues",
    help="Distinct queues the namespace's streams serve per dispatcher (0 = the default, 64).",
)


def _t(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def namespace_dict(n: Namespace) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Namespace` as JSON-able values (instants RFC 3339, retention seconds)."""
    q = n.quotas
    return {
        "name": n.name,
        "description": n.description,
        "retention_s": n.retention.total_seconds() if n.retention is not None else 0,
        "quotas": {
            "max_create_rate": q.max_create_rate,
            "max_pending_jobs": q.max_pending_jobs,
            "max_schedules": q.max_schedules,
            "max_worker_streams": q.max_worker_streams,
            "max_queues_per_hello": q.max_queues_per_hello,
            "max_worker_streams_per_principal": q.max_worker_streams_per_principal,
            "max_queues_per_principal": q.max_queues_per_principal,
            "max_streamed_queues": q.max_streamed_queues,
        },
        "create_time": _t(n.create_time),
        "update_time": _t(n.update_time),
        "etag": n.etag,
    }


def grant_dict(g: Grant) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Grant` as JSON-able values."""
    return {
        "principal": g.principal,
        "namespace": g.namespace,
        "role": g.role,
        "queues": list(g.queues),
        "create_time": _t(g.create_time),
    }


def principal_dict(p: Principal) -> dict[str, Any]:
    """A :class:`~gnomon.sdk.Principal` as JSON-able values."""
    return {
        "name": p.name,
        "description": p.description,
        "create_time": _t(p.create_time),
        "disable_time": _t(p.disable_time),
        "grants": [grant_dict(g) for g in p.grants],
    }


def key_dict(k: ApiKey) -> dict[str, Any]:
    """An :class:`~gnomon.sdk.ApiKey` as JSON-able values (never a secret)."""
    return {
        "name": k.name,
        "id": k.id,
        "description": k.description,
        "create_time": _t(k.create_time),
        "expire_time": _t(k.expire_time),
        "revoke_time": _t(k.revoke_time),
    }


def _show_namespace(n: Namespace, json_out: bool) -> None:
    d = namespace_dict(n)
    if json_out:
        typer.echo(json.dumps(d, indent=2))
        return
    q = d["quotas"]
    limits = ", ".join(f"{k}={v:g}" for k, v in q.items() if v) or "none"
    fields(
        [
            ("name", d["name"]),
            ("description", d["description"] or None),
            ("retention", f"{d['retention_s']:g} s" if d["retention_s"] else "cluster default"),
            ("quotas", limits),
            ("created", d["create_time"]),
            ("updated", d["update_time"]),
            ("etag", d["etag"]),
        ],
        12,
    )


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return 0.0 if text.strip() == "0" else parse_duration(text).total_seconds()
    except ValueError as e:
        usage(f"--retention: {e}")


# ---- namespaces ----------------------------------------------------------------------------------


@namespace_app.command("create")
def namespace_create(
    namespace_id: str = typer.Argument(..., help="1-63 characters of [a-z0-9-]."),
    description: str | None = DESCRIPTION,
    retention: str | None = RETENTION,
    max_create_rate: float | None = RATE,
    max_pending_jobs: int | None = PENDING,
    max_schedules: int | None = SCHEDULES,
    max_worker_streams: int | None = STREAMS,
    max_queues_per_hello: int | None = QUEUES,
    max_worker_streams_per_principal: int | None = P_STREAMS,
    max_queues_per_principal: int | None = P_QUEUES,
    max_streamed_queues: int | None = NS_QUEUES,
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """Create a namespace (needs the admin role in '*')."""
    quotas = NamespaceQuotas(
        max_create_rate or 0.0,
        max_pending_jobs or 0,
        max_schedules or 0,
        max_worker_streams or 0,
        max_queues_per_hello or 0,
        max_worker_streams_per_principal or 0,
        max_queues_per_principal or 0,
        max_streamed_queues or 0,
    )
    seconds = _seconds(retention)
    n = run(
        api,
        "default",
        lambda c: c.create_namespace(
            namespace_id, description=description or "", retention=seconds, quotas=quotas
        ),
    )
    _show_namespace(n, json_out)


@namespace_app.command("get")
def namespace_get(
    namespace_id: str = typer.Argument(..., help="Namespace id or namespaces/{id}."),
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """Show a namespace: description, retention, quotas, etag."""
    _show_namespace(run(api, "default", lambda c: c.get_namespace(namespace_id)), json_out)


@namespace_app.command("list")
def namespace_list(json_out: bool = JSON_OUT, api: str = API) -> None:
    """List the namespaces you may read (reader or more there; all of them with such a role in '*')."""
    items = run(api, "default", lambda c: list(c.list_namespaces()))
    if json_out:
        typer.echo(json.dumps([namespace_dict(n) for n in items], indent=2))
        return
    rows = [["NAMESPACE", "ETAG", "QUOTAS", "DESCRIPTION"]]
    for n in items:
        q = namespace_dict(n)["quotas"]
        rows.append([n.id, n.etag, ",".join(f"{k}={v:g}" for k, v in q.items() if v) or "-", n.description])
    table(rows)


@namespace_app.command("update")
def namespace_update(
    namespace_id: str = typer.Argument(..., help="Namespace id or namespaces/{id}."),
    description: str | None = DESCRIPTION,
    retention: str | None = RETENTION,
    max_create_rate: float | None = RATE,
    max_pending_jobs: int | None = PENDING,
    max_schedules: int | None = SCHEDULES,
    max_worker_streams: int | None = STREAMS,
    max_queues_per_hello: int | None = QUEUES,
    max_worker_streams_per_principal: int | None = P_STREAMS,
    max_queues_per_principal: int | None = P_QUEUES,
    max_streamed_queues: int | None = NS_QUEUES,
    etag: str = ETAG,
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """Change only the given settings of a namespace (needs the admin role in it)."""
    given = {
        "max_create_rate": max_create_rate,
        "max_pending_jobs": max_pending_jobs,
        "max_schedules": max_schedules,
        "max_worker_streams": max_worker_streams,
        "max_queues_per_hello": max_queues_per_hello,
        "max_worker_streams_per_principal": max_worker_streams_per_principal,
        "max_queues_per_principal": max_queues_per_principal,
        "max_streamed_queues": max_streamed_queues,
    }
    quotas = {k: v for k, v in given.items() if v is not None}
    seconds = _seconds(retention)
    if description is None and seconds is None and not quotas:
        usage("nothing to change: give --description, --retention or a quota option")
    n = run(
        api,
        "default",
        lambda c: c.update_namespace(
            namespace_id, description=description, retention=seconds, quotas=quotas, etag=etag
        ),
    )
    _show_namespace(n, json_out)


@namespace_app.command("delete")
def namespace_delete(
    namespace_id: str = typer.Argument(..., help="Namespace id or namespaces/{id}."),
    etag: str = ETAG,
    api: str = API,
) -> None:
    """Delete a namespace's settings (refused while it has pending jobs or schedules)."""
    run(api, "default", lambda c: c.delete_namespace(namespace_id, etag))
    typer.echo(f"deleted namespaces/{namespace_id.removeprefix('namespaces/')}")


# ---- principals and keys --------------------------------------------------------------------------


@principal_app.command("create")
def principal_create(
    principal_id: str = typer.Argument(..., help="1-128 printable characters, no '/' or spaces."),
    description: str | None = DESCRIPTION,
    api: str = API,
) -> None:
    """Create a principal (then give it a key and a role)."""
    p = run(api, "default", lambda c: c.create_principal(principal_id, description or ""))
    typer.echo(p.name)


@principal_app.command("get")
def principal_get(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."),
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """Show a principal and its grants."""
    p = run(api, "default", lambda c: c.get_principal(principal_id))
    if json_out:
        typer.echo(json.dumps(principal_dict(p), indent=2))
        return
    fields(
        [
            ("name", p.name),
            ("description", p.description or None),
            ("created", _t(p.create_time)),
            ("disabled", _t(p.disable_time)),
        ],
        12,
    )
    for g in p.grants:
        typer.echo(
            f"grant        {g.role.lower()} in {g.namespace}"
            + (f" queues {','.join(g.queues)}" if g.queues else "")
        )


@principal_app.command("list")
def principal_list(json_out: bool = JSON_OUT, api: str = API) -> None:
    """List principals."""
    items = run(api, "default", lambda c: list(c.list_principals()))
    if json_out:
        typer.echo(json.dumps([principal_dict(p) for p in items], indent=2))
        return
    rows = [["PRINCIPAL", "CREATED", "DISABLED", "DESCRIPTION"]]
    rows += [[p.id, _t(p.create_time) or "-", _t(p.disable_time) or "-", p.description] for p in items]
    table(rows)


@principal_app.command("disable")
def principal_disable(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."), api: str = API
) -> None:
    """Disable a principal: every key and certificate of it is refused from then on."""
    p = run(api, "default", lambda c: c.disable_principal(principal_id))
    typer.echo(f"disabled {p.name} at {_t(p.disable_time)}")


@key_app.command("create")
def key_create(
    principal_id: str = typer.Argument(..., help="Whose key: principal id or principals/{id}."),
    description: str | None = DESCRIPTION,
    expires_in: str | None = typer.Option(None, "--expires-in", help="Valid for this long (e.g. 90d)."),
    expires_at: str | None = typer.Option(None, "--expires-at", help="Valid until this RFC 3339 instant."),
    api: str = API,
) -> None:
    """Create an API key. The key is printed once; it cannot be shown again."""
    if expires_in and expires_at:
        usage("give at most one of --expires-in and --expires-at")
    expire: datetime | None = None
    try:
        if expires_in:
            expire = datetime.now(UTC) + parse_duration(expires_in)
        elif expires_at:
            expire = parse_instant(expires_at)
    except ValueError as e:
        usage(str(e))
    created = run(api, "default", lambda c: c.create_api_key(principal_id, description or "", expire))
    typer.echo(created.token)
    typer.echo(
        f"warning: this is the only time key {created.key.id} is shown; store it now "
        "(send it as 'authorization: Bearer <key>'; it cannot be shown again)",
        err=True,
    )


@key_app.command("list")
def key_list(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."),
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """List a principal's API keys (ids and times, never secrets)."""
    items = run(api, "default", lambda c: list(c.list_api_keys(principal_id)))
    if json_out:
        typer.echo(json.dumps([key_dict(k) for k in items], indent=2))
        return
    rows = [["KEY", "CREATED", "EXPIRES", "REVOKED", "DESCRIPTION"]]
    rows += [
        [
            k.id,
            _t(k.create_time) or "-",
            _t(k.expire_time) or "never",
            _t(k.revoke_time) or "-",
            k.description,
        ]
        for k in items
    ]
    table(rows)


@key_app.command("revoke")
def key_revoke(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."),
    key_id: str = typer.Argument(..., help="The key id (16 hex digits; `gnomon auth key list` shows it)."),
    api: str = API,
) -> None:
    """Revoke an API key (refused by every server within its credential cache time)."""
    k = run(api, "default", lambda c: c.revoke_api_key(principal_id, key_id))
    typer.echo(f"revoked {k.name} at {_t(k.revoke_time)}")


# ---- grants ---------------------------------------------------------------------------------------


@grant_app.command("add")
def grant_add(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."),
    role: str = typer.Argument(..., help="admin, operator, client, worker or reader."),
    namespace: str = typer.Argument(..., help="Namespace id, or '*' for every namespace."),
    queue: list[str] = typer.Option(
        [], "--queue", "-q", help="Worker role: a queue it may lease from (repeat)."
    ),
    api: str = API,
) -> None:
    """Grant a role in a namespace (needs the admin role there)."""
    g = run(api, "default", lambda c: c.grant_role(principal_id, role, namespace, queue))
    typer.echo(
        f"{g.principal}: {g.role.lower()} in {g.namespace}"
        + (f" queues {','.join(g.queues)}" if g.queues else "")
    )


@grant_app.command("remove")
def grant_remove(
    principal_id: str = typer.Argument(..., help="Principal id or principals/{id}."),
    role: str = typer.Argument(..., help="admin, operator, client, worker or reader."),
    namespace: str = typer.Argument(..., help="Namespace id, or '*'."),
    api: str = API,
) -> None:
    """Remove a role of a principal in a namespace."""
    removed = run(api, "default", lambda c: c.revoke_role(principal_id, role, namespace))
    typer.echo("removed" if removed else "not held (nothing changed)")


@grant_app.command("list")
def grant_list(
    namespace: str = typer.Argument(..., help="Namespace id, or '*' for every grant."),
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's grants."),
    json_out: bool = JSON_OUT,
    api: str = API,
) -> None:
    """List the grants in a namespace."""
    items = run(api, "default", lambda c: list(c.list_grants(namespace, principal)))
    if json_out:
        typer.echo(json.dumps([grant_dict(g) for g in items], indent=2))
        return
    rows = [["PRINCIPAL", "NAMESPACE", "ROLE", "QUEUES"]]
    rows += [[g.principal, g.namespace, g.role.lower(), ",".join(g.queues) or "-"] for g in items]
    table(rows)


@app.command()
def whoami(json_out: bool = JSON_OUT, api: str = API) -> None:
    """Show who the server thinks you are: principal, credential kind and grants."""
    me = run(api, "default", lambda c: c.whoami())
    if json_out:
        typer.echo(
            json.dumps(
                {"principal": me.principal, "kind": me.kind, "grants": [grant_dict(g) for g in me.grants]},
                indent=2,
            )
        )
        return
    typer.echo(f"{me.principal} ({me.kind.lower().replace('_', ' ')})")
    for g in me.grants:
        typer.echo(
            f"  {g.role.lower()} in {g.namespace}" + (f" queues {','.join(g.queues)}" if g.queues else "")
        )
