"""Options and argument parsing shared by the ``gnomon schedule`` commands (usage errors exit 2)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import typer

from gnomon.cli.common import usage
from gnomon.cli.durations import parse_duration, parse_instant

CRON = typer.Option(None, "--cron", help="Cron rule: 5 fields (or 6 with seconds), @daily, Quartz L/W/#.")
RRULE = typer.Option(None, "--rrule", help="RFC 5545 rule, e.g. 'FREQ=WEEKLY;BYDAY=MO;BYHOUR=9'.")
EVERY = typer.Option(None, "--every", help="Fixed interval anchored at --start: 30s, 15m, 1h30m.")
TZ = typer.Option("UTC", "--tz", "--time-zone", help="IANA time zone the rule is evaluated in.")
START = typer.Option(None, "--start", help="RFC 3339: no occurrence before it (anchor of --every, DTSTART).")
END = typer.Option(None, "--end", help="RFC 3339: no occurrence after it.")
GAP = typer.Option(None, "--dst-gap", help="Spring-forward gap: shift_forward (default) or skip.")
FOLD = typer.Option(None, "--dst-fold", help="Fall-back fold: first (default), second or both.")

GAPS = ("shift_forward", "skip")
FOLDS = ("first", "second", "both")
MISFIRES = ("run_latest", "skip", "coalesce", "run_all")
OVERLAPS = ("allow", "skip", "buffer_one", "buffer_all", "cancel_other")
DECISIONS = (
    "fired",
    "late",
    "coalesced",
    "buffered",
    "skipped_overlap",
    "skipped_misfire",
    "skipped_dst_gap",
    "skipped_paused",
    "deduplicated",
    "skipped_quota",
)


def choice(value: str | None, allowed: tuple[str, ...], flag: str) -> str | None:
    """``value`` normalised (``"buffer-one"`` -> ``"BUFFER_ONE"``) if it is one of ``allowed``; ``None``
    stays ``None``; anything else exits 2 naming ``flag``."""
    if value is None:
        return None
    v = value.strip().lower().replace("-", "_")
    if v not in allowed:
        usage(f"{flag} must be one of {', '.join(allowed)}, not {value!r}")
    return v.upper()


def rule(cron: str | None, rrule: str | None, every: str | None, *, required: bool = True) -> dict[str, Any]:
    """The rule keyword arguments of the SDK (``cron``/``rrule``/``every`` as a ``timedelta``); more
    than one (or none when ``required``) exits 2."""
    given: dict[str, Any] = {
        k: v for k, v in (("cron", cron), ("rrule", rrule), ("every", every)) if v is not None
    }
    if len(given) > 1 or (required and not given):
        usage("give exactly one of --cron, --rrule and --every")
    if "every" in given:
        given["every"] = duration(given["every"], "--every")
    return given


def duration(text: str | None, flag: str) -> timedelta | None:
    """``parse_duration(text)``, ``None`` for ``None``; a bad value exits 2 naming ``flag``."""
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as e:
        usage(f"{flag}: {e}")


def instant(text: str | None, flag: str) -> datetime | None:
    """``parse_instant(text)``, ``None`` for ``None``; a bad value exits 2 naming ``flag``."""
    if text is None:
        return None
    try:
        return parse_instant(text)
    except ValueError as e:
        usage(f"{flag}: {e}")
