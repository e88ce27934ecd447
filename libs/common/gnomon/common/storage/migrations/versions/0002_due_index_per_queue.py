"""due index per (namespace, queue): claims never scan another queue's backlog

Revision ID: 0002
Revises: 0001
"""
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f('ix_jobs_region_namespace_queue_state_scheduled_at_shard'), 'jobs',
                    ['region', 'namespace', 'queue', 'state', 'scheduled_at', 'shard'], unique=False)
    op.drop_index(op.f('ix_jobs_region_state_scheduled_at_shard'), table_name='jobs')


def downgrade() -> None:
    op.create_index(op.f('ix_jobs_region_state_scheduled_at_shard'), 'jobs',
                    ['region', 'state', 'scheduled_at', 'shard'], unique=False)
    op.drop_index(op.f('ix_jobs_region_namespace_queue_state_scheduled_at_shard'), table_name='jobs')
