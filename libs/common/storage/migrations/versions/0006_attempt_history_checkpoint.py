"""attempt history fields and progress checkpoints (filled by that work)

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa  # noqa: F401
from alembic import op  # noqa: F401

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
