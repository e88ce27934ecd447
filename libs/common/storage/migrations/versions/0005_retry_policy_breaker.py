"""per-job retry policy, retry budget and circuit breaker state (filled by that work)

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
