"""queue_limits: per-queue dispatch rate limits (token bucket shared by all dispatchers)

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'queue_limits',
        sa.Column('region', sa.String(length=32), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=False),
        sa.Column('queue', sa.String(length=64), nullable=False),
        sa.Column('rate', sa.Double(), nullable=False, comment='tokens (dispatches) added per second'),
        sa.Column('burst', sa.Integer(), nullable=False, comment='bucket size: dispatches allowed at once'),
        sa.Column('tokens', sa.Double(), nullable=False, comment='tokens left at refilled_at'),
        sa.Column('refilled_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False, comment='when the limit was last set'),
        sa.PrimaryKeyConstraint('region', 'namespace', 'queue', name=op.f('pk_queue_limits')))


def downgrade() -> None:
    op.drop_table('queue_limits')
