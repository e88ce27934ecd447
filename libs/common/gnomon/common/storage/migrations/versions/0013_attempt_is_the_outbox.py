"""schema: the QUEUED attempt row is the outbox record; the separate outbox table is dropped

The outbox table duplicated each attempt (one insert at the claim, one update at the accept) only to
say "claimed, not yet accepted", which the attempt's own state already says. The relay's recovery scan
now reads QUEUED attempts through the partial index ``ix_attempts_queued``. Rows of a running system
lose nothing: every unpublished outbox row belongs to a QUEUED attempt, which the scan finds.

Revision ID: 0013
Revises: 0012
"""
from alembic import op
import sqlalchemy as sa

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        'ix_attempts_queued',
        'attempts',
        ['region', 'shard', 'claimed_at'],
        postgresql_where=sa.text("state = 'QUEUED'"),
    )
    op.drop_table('outbox')


def downgrade() -> None:
    op.create_table(
        'outbox',
        sa.Column('job_id', sa.Uuid(), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.Column('region', sa.String(length=32), nullable=False),
        sa.Column('shard', sa.Integer(), nullable=False),
        sa.Column('token', sa.BigInteger(), nullable=False),
        sa.Column('queue', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('published_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('publish_count', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('job_id', 'attempt', name=op.f('pk_outbox')),
    )
    op.create_index(op.f('ix_outbox_region_published_at_shard'), 'outbox', ['region', 'published_at', 'shard'])
    op.execute(
        "INSERT INTO outbox (job_id, attempt, region, shard, token, queue, created_at, publish_count) "
        "SELECT job_id, attempt, region, shard, token, queue, claimed_at, 0 FROM attempts WHERE state = 'QUEUED'"
    )
    op.drop_index('ix_attempts_queued', table_name='attempts')
