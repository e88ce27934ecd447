"""jobs.idempotent, failure_class, cancel_requested_at; attempts.cancel_requested; deadline index

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('idempotent', sa.Boolean(), server_default=sa.false(), nullable=False,
                                    comment='an attempt whose outcome is unknown (lease lost while running) may be retried'))
    op.add_column('jobs', sa.Column('failure_class', sa.String(length=16), nullable=True,
                                    comment='class of the last failure'))
    op.add_column('jobs', sa.Column('cancel_requested_at', sa.DateTime(timezone=True), nullable=True,
                                    comment='cancellation asked while RUNNING'))
    op.add_column('attempts', sa.Column('cancel_requested', sa.Boolean(), server_default=sa.false(), nullable=False,
                                        comment='pushed to the worker in heartbeat acks'))
    op.create_index(op.f('ix_jobs_region_state_deadline'), 'jobs', ['region', 'state', 'deadline'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_jobs_region_state_deadline'), table_name='jobs')
    op.drop_column('attempts', 'cancel_requested')
    op.drop_column('jobs', 'cancel_requested_at')
    op.drop_column('jobs', 'failure_class')
    op.drop_column('jobs', 'idempotent')
