"""region_owners: the region serving each home region and its region-level fencing token

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'region_owners',
        sa.Column('region', sa.String(length=32), nullable=False, comment='the home region'),
        sa.Column('owner_region', sa.String(length=32), nullable=False,
                  comment='the region whose services act for it'),
        sa.Column('owner', sa.String(length=128), nullable=False, comment='the dispatcher that took the region lease'),
        sa.Column('token', sa.BigInteger(), nullable=False,
                  comment='etcd create revision of the region ownership key'),
        sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('region', name=op.f('pk_region_owners')))


def downgrade() -> None:
    op.drop_table('region_owners')
