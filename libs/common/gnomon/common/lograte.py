"""Rate-limited logging of repeated lines: at most one record per ``(logger, key)`` per interval.

A client that can make a server log a line (a malformed credential, a request that trips an
unexpected fault) must not be able to fill the log: every call would cost disk, and the one line an
operator needs drowns. :class:`LogLimiter` lets the first record of a key through, drops the
identical ones that follow within ``interval_s`` seconds and counts them; the next record let
through says how many were suppressed (``... [suppressed 4999 identical lines in 61 s]``).

The key is chosen by the caller and must have low cardinality, never client text: e.g. an
exception's type and the code location that raised it. The table of keys is bounded
(``max_keys``, least recently seen evicted first), so even a key space a client can influence
costs bounded memory. Thread-safe (JWT verification logs from worker threads).

:func:`shared` is the process's one limiter, with ``GNOMON_LOG_REPEAT_INTERVAL_S``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["LogLimiter", "shared"]


class LogLimiter:
    """Lets through at most one log record per ``(logger name, key)`` every ``interval_s`` seconds.

    Args:
        interval_s: seconds during which repeats of a key are suppressed (0: nothing is).
        max_keys: keys remembered at once; beyond it the least recently seen is forgotten (so its
            next record is let through).
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self, interval_s: float = 60.0, *, max_keys: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s, self.max_keys, self._clock = interval_s, max_keys, clock
        # (logger, key) -> [time of the last record let through, suppressed since then]
        self._seen: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, logger_name: str, key: str) -> tuple[bool, int, float]:
        """``(let through?, repeats suppressed before it, seconds since the last one let through)``
        for one record of ``key`` now; a suppressed record is counted."""
        now = self._clock()
        k = (logger_name, key)
        with self._lock:
            entry = self._seen.get(k)
            if entry is not None:
                self._seen.move_to_end(k)
                if now - entry[0] < self.interval_s:
                    entry[1] += 1
                    return False, 0, 0.0
                suppressed, since = int(entry[1]), now - entry[0]
                entry[0], entry[1] = now, 0
                return True, suppressed, since
            while len(self._seen) >= self.max_keys:
                self._seen.popitem(last=False)
            self._seen[k] = [now, 0]
            return True, 0, 0.0

    def log(
        self, logger: logging.Logger, level: int, key: str, msg: str, *args: Any, exc_info: Any = None
    ) -> bool:
        """Logs ``msg % args`` at ``level`` on ``logger`` (with ``exc_info`` if given) unless a record
        of the same ``key`` on that logger was let through less than ``interval_s`` ago. The line let
        through after suppressed repeats ends with ``[suppressed N identical lines in S s]``.
        Returns True if the record was emitted (or the level is disabled and it would have been)."""
        if not logger.isEnabledFor(level):
            return False
        ok, suppressed, since = self.allow(logger.name, key)
        if not ok:
            return False
        if suppressed:
            msg = f"{msg} [suppressed %d identical lines in %.0f s]"
            args = (*args, suppressed, since)
        logger.log(level, msg, *args, exc_info=exc_info)
        return True


_SHARED: LogLimiter | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> LogLimiter:
    """The process's limiter (built on first use with ``GNOMON_LOG_REPEAT_INTERVAL_S``)."""
    global _SHARED
    if _SHARED is None:
        with _SHARED_LOCK:
            if _SHARED is None:
                from gnomon.common.throttle_settings import LogRepeatSettings

                _SHARED = LogLimiter(LogRepeatSettings().interval_s)
    return _SHARED
