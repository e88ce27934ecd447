"""Alembic migrations for the Gnomon schema; :func:`upgrade` applies them to head.

``python -m gnomon.common.storage.migrations URL`` does the same from a shell
(``gnomon migrate`` is the CLI spelling).
"""

from __future__ import annotations

import os
import sys

from alembic import command
from alembic.config import Config

HERE = os.path.dirname(__file__)


def config(url: str) -> Config:
    """An Alembic config pointing at these migrations and ``url`` (a SQLAlchemy URL, sync driver)."""
    cfg = Config()
    cfg.set_main_option("script_location", HERE)
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Applies migrations up to ``revision`` on the database at ``url``. Idempotent."""
    command.upgrade(config(url), revision)


if __name__ == "__main__":
    upgrade(sys.argv[1])
