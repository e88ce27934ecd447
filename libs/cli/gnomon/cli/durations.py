"""Parsing of CLI time arguments: durations like ``2s``, ``500ms``, ``1h30m`` and RFC 3339 instants."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> timedelta:
    """``"1h30m"`` -> 5400 s. Units ms, s, m, h, d; a bare number means seconds.
    Raises ``ValueError`` on anything else (including negative values)."""
    t = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return timedelta(seconds=float(t))
    pos, total = 0, 0.0
    for m in _PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(t) or not t:
        raise ValueError(f"not a duration: {text!r} (use e.g. 2s, 500ms, 1h30m)")
    return timedelta(seconds=total)


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant (``2026-11-29T09:00:00Z`` or with an offset) -> aware datetime.
    Raises ``ValueError`` if it has no offset or does not parse."""
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset; RFC 3339 needs one (e.g. Z)")
    return dt
