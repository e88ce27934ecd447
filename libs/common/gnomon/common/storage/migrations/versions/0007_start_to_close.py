"""jobs.start_to_close_ms: a bound on one attempt's run time once accepted

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('start_to_close_ms', sa.BigInteger(), nullable=True,
                                    comment="bound on one attempt's run time once accepted, ms; NULL = none"))


def downgrade() -> None:
    op.drop_column('jobs', 'start_to_close_ms')
