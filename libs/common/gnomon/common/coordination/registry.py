"""Key layout in etcd and the dispatcher registry.

Keys (``prefix`` defaults to ``/gnomon``):

* ``{prefix}/{region}/dispatchers/{dispatcher_id}`` -> JSON ``{"address": "host:port", "id": ...}``,
  attached to the dispatcher's session lease (gone when it dies).
* ``{prefix}/{region}/planners/{planner_id}`` -> the same JSON, attached to the planner's lease
  (used only to send it hints).
* ``{prefix}/regions/{region}/owner`` -> JSON ``{"region": serving region, "id": dispatcher id}``,
  attached to the holder's session lease: the home-region ownership lease; its ``create_revision``
  is the region-level fencing token (normally a dispatcher of the home region holds it; a standby
  region's dispatcher takes it only while no dispatcher of the home region is registered).
* ``{prefix}/{region}/shards/{shard:05d}`` -> dispatcher id, attached to the owner's lease; its
  ``create_revision`` is the shard's fencing token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gnomon.common.coordination.etcd import EtcdClient


def dispatchers_prefix(prefix: str, region: str) -> bytes:
    """Prefix of all dispatcher registrations of a region."""
    return f"{prefix}/{region}/dispatchers/".encode()


def planners_prefix(prefix: str, region: str) -> bytes:
    """Prefix of all planner registrations of a region."""
    return f"{prefix}/{region}/planners/".encode()


def shards_prefix(prefix: str, region: str) -> bytes:
    """Prefix of all shard ownership keys of a region."""
    return f"{prefix}/{region}/shards/".encode()


def shard_key(prefix: str, region: str, shard: int) -> bytes:
    """Ownership key of one shard."""
    return shards_prefix(prefix, region) + f"{shard:05d}".encode()


def region_key(prefix: str, region: str) -> bytes:
    """The ownership key of home region ``region`` (its create revision is the region token)."""
    return f"{prefix}/regions/{region}/owner".encode()


@dataclass(frozen=True)
class DispatcherInfo:
    """A live dispatcher as registered in etcd. ``region``: the region whose shards it serves under
    this registration; ``home``: its own region (differs for a standby serving a failed region)."""

    dispatcher_id: str
    region: str
    address: str
    home: str = ""


def encode_registration(info: DispatcherInfo) -> bytes:
    """The registration value for ``info``."""
    return json.dumps(
        {
            "id": info.dispatcher_id,
            "region": info.region,
            "address": info.address,
            "home": info.home or info.region,
        }
    ).encode()


async def home_alive(client: EtcdClient, prefix: str, region: str) -> bool:
    """True if a dispatcher whose home is ``region`` is registered for it (standbys do not count).
    Raises ``EtcdError`` if etcd is unreachable."""
    return any(d.home == region for d in await list_dispatchers(client, prefix, region))


async def list_dispatchers(client: EtcdClient, prefix: str, region: str) -> list[DispatcherInfo]:
    """Live dispatchers of ``region``, sorted by id. Raises ``EtcdError`` if etcd is unreachable."""
    return await _list(client, dispatchers_prefix(prefix, region), region)


async def list_planners(client: EtcdClient, prefix: str, region: str) -> list[DispatcherInfo]:
    """Live planners of ``region`` (id, region, address), sorted by id. Raises ``EtcdError``."""
    return await _list(client, planners_prefix(prefix, region), region)


async def _list(client: EtcdClient, key_prefix: bytes, region: str) -> list[DispatcherInfo]:
    out = []
    for kv in await client.get_prefix(key_prefix):
        try:
            d = json.loads(kv.value)
            out.append(
                DispatcherInfo(
                    d["id"], d.get("region", region), d["address"], d.get("home", d.get("region", region))
                )
            )
        except (ValueError, KeyError):
            continue
    return sorted(out, key=lambda d: d.dispatcher_id)
