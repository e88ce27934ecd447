"""``gnomon shards``: who owns which shard of a region, with its fencing token."""

from __future__ import annotations

import json

import typer

from gnomon.cli.common import API, run
from gnomon.cli.render import shard_dict


def shards(
    region: str | None = typer.Option(None, "--region", help="Region (default: the API's own)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON array."),
    api: str | None = API,
) -> None:
    """List every shard with its owner, etcd fencing token and the token recorded in the database."""
    rows = run(api, "default", lambda c: c.list_shards(region or ""), reason=False)
    if json_out:
        typer.echo(json.dumps([shard_dict(r) for r in rows], indent=2))
        return
    typer.echo(f"{'REGION':<12} {'SHARD':>5}  {'OWNER':<40} {'TOKEN':>10} {'RECORDED':>10}  STATE")
    for r in rows:
        state = "owned" if r.owned else "unowned"
        if r.owned and r.recorded_token != r.fencing_token:
            state += " (token not recorded yet)"
        typer.echo(
            f"{r.region:<12} {r.shard:>5}  {r.owner or '-':<40} {r.fencing_token or '-':>10} "
            f"{r.recorded_token or '-':>10}  {state}"
        )
    owners: dict[str, int] = {}
    for r in rows:
        if r.owned:
            owners[r.owner] = owners.get(r.owner, 0) + 1
    typer.echo(
        f"{sum(owners.values())}/{len(rows)} shards owned by {len(owners)} dispatcher(s)"
        + "".join(f"\n  {o}: {n}" for o, n in sorted(owners.items()))
    )
