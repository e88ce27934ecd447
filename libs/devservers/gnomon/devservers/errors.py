"""The one exception type of :mod:`gnomon.devservers` and its subclass for an unreachable data dir."""

from __future__ import annotations

__all__ = ["DataDirNotReachableError", "EmbeddedServerError"]


class EmbeddedServerError(RuntimeError):
    """A server could not be found, started, restarted or stopped.

    The message names the command that failed and ends with the tail of the server's log, so it can
    span many lines; its first line is a summary.
    """


class DataDirNotReachableError(EmbeddedServerError):
    """The OS user a server must run as cannot enter its data directory.

    Raised before anything is started, e.g. when running as root (PostgreSQL then runs as OS user
    ``postgres``) with a data dir inside a private (``0700``) folder. The message is one line that
    names the blocking directory and says what to do. Attributes: :attr:`path` (the data dir),
    :attr:`blocking` (the first ancestor the user cannot enter, or the data dir itself) and
    :attr:`os_user`.
    """

    def __init__(self, message: str, *, path: str, blocking: str, os_user: str) -> None:
        super().__init__(message)
        self.path = path
        self.blocking = blocking
        self.os_user = os_user
