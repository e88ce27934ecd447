"""attempt history fields and progress checkpoints: jobs.checkpoint (<= 64 KiB)

The attempt history (``ListJobAttempts``) reads the existing ``attempts`` rows and needs no new
column. Progress checkpoints live on the job row: ``jobs.checkpoint`` holds the latest checkpoint
saved by a running attempt (heartbeat path) and is handed to the next attempt with its
assignment. The CHECK constraint backs the 64 KiB limit the dispatcher enforces first.

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('checkpoint', sa.LargeBinary(), nullable=True,
                                    comment='latest progress checkpoint saved by a running attempt (<= 64 KiB); '
                                            'handed to the next attempt'))
    op.create_check_constraint('ck_jobs_checkpoint_size', 'jobs',
                               'checkpoint IS NULL OR octet_length(checkpoint) <= 65536')


def downgrade() -> None:
    op.drop_constraint('ck_jobs_checkpoint_size', 'jobs', type_='check')
    op.drop_column('jobs', 'checkpoint')
