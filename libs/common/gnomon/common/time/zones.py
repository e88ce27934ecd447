"""IANA zones from the pinned tzdata wheel, and classification of local wall times (PEP 495)."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import RuleError

__all__ = [
    "FOLD",
    "GAP",
    "NORMAL",
    "UTC",
    "classify",
    "fmt_wall",
    "gap_transition",
    "min_offset_near",
    "tzdata_version",
    "tzdata_zones",
    "utc_offset",
]

NORMAL, FOLD, GAP = 0, 1, 2
_ONE_S = timedelta(seconds=1)


def tzdata_version() -> str:
    """Version of the installed ``tzdata`` wheel (e.g. ``"2026.6"``); services report it."""
    return importlib.metadata.version("tzdata")


@functools.lru_cache(maxsize=1)
def tzdata_zones() -> frozenset[str]:
    """The zone names the pinned ``tzdata`` wheel ships (its ``zones`` index, 598 names in 2026.6)."""
    return frozenset(importlib.resources.files("tzdata").joinpath("zones").read_text().split())


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    # Read from the tzdata wheel, never the host's /usr/share/zoneinfo (zoneinfo's default TZPATH
    # would prefer it): every service evaluates with the same pinned data, whatever the host has.
    if name not in tzdata_zones():
        raise ZoneInfoNotFoundError(name)
    path = importlib.resources.files("tzdata").joinpath("zoneinfo", *name.split("/"))
    with path.open("rb") as f:
        return ZoneInfo.from_file(f, key=name)


def get_zone(name: str) -> ZoneInfo:
    """The cached :class:`ZoneInfo` for an IANA name.

    Raises:
        RuleError: ``INVALID_TIME_ZONE`` (field ``time_zone``) for an unknown or malformed name.
    """
    if not isinstance(name, str) or not name or name != name.strip() or "\\" in name or name.startswith("/"):
        raise RuleError("INVALID_TIME_ZONE", "time_zone", f"'{name}' is not an IANA time zone name")
    try:
        return _zone(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as e:
        raise RuleError(
            "INVALID_TIME_ZONE",
            "time_zone",
            f"'{name}' is not an IANA time zone known to tzdata {tzdata_version()}",
        ) from e


def classify(zone: tzinfo, wall: datetime) -> tuple[int, timedelta, timedelta]:
    """Classify a naive local wall time: ``(NORMAL|FOLD|GAP, offset_fold0, offset_fold1)``.

    Per PEP 495, in a gap fold=0 uses the offset before the transition and fold=1 the one after;
    so fold-0 offset < fold-1 offset means a gap, > means a fold (ambiguous time).
    """
    off0 = utc_offset(zone, wall)
    off1 = utc_offset(zone, wall.replace(fold=1))
    if off0 == off1:
        return NORMAL, off0, off1
    return (FOLD if off0 > off1 else GAP), off0, off1


def gap_transition(zone: tzinfo, wall: datetime, off0: timedelta, off1: timedelta) -> datetime:
    """The UTC instant (naive) at which the gap containing ``wall`` starts: the first valid
    instant after the gap. Binary search between ``wall - off1`` (before) and ``wall - off0`` (after)."""
    lo = wall - off1  # still the old offset
    hi = wall - off0  # already the new offset
    while hi - lo > _ONE_S:
        mid = lo + (hi - lo) // 2
        mid = mid.replace(microsecond=0)
        if _offset_at_utc(zone, mid) == off0:
            lo = mid
        else:
            hi = mid
    return hi


def utc_offset(zone: tzinfo, wall: datetime) -> timedelta:
    """The UTC offset of ``zone`` at naive local ``wall`` (a zone always has one)."""
    off = zone.utcoffset(wall)
    if off is None:
        raise ValueError(f"time zone {zone} has no UTC offset at {wall}")
    return off


def _offset_at_utc(zone: tzinfo, utc_naive: datetime) -> timedelta:
    off = utc_naive.replace(tzinfo=UTC).astimezone(zone).utcoffset()
    if off is None:
        raise ValueError(f"time zone {zone} has no UTC offset at {utc_naive} UTC")
    return off


def min_offset_near(zone: tzinfo, utc_naive: datetime) -> timedelta:
    """The smallest UTC offset the zone has within about a day of an instant (used to start the
    wall-time search early enough that second passes and gap markers are not missed)."""
    return min(_offset_at_utc(zone, utc_naive + timedelta(hours=h)) for h in (-26, -3, 0, 3, 26))


def fmt_wall(wall: datetime) -> str:
    """``HH:MM`` (or ``HH:MM:SS`` when seconds are set) for notes."""
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")
