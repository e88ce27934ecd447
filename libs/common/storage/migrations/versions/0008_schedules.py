"""recurring schedules: schedules, schedule_occurrences (decision records), catchup_budget; occurrence
columns on jobs

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

from gnomon.common.storage.schema import catchup_budget, schedule_occurrences, schedules

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column('jobs', sa.Column('schedule_uid', sa.Uuid(), nullable=True,
                                    comment='the schedule this job is an occurrence of'))
    op.add_column('jobs', sa.Column('schedule_id', sa.String(63), nullable=True,
                                    comment="that schedule's id (its resource name part)"))
    op.add_column('jobs', sa.Column('nominal_time', _TS, nullable=True,
                                    comment="the occurrence's nominal fire time (UTC)"))
    op.add_column('jobs', sa.Column('coalesced_count', sa.Integer(), nullable=True,
                                    comment='COALESCE catch-up run: missed nominal times'))
    op.add_column('jobs', sa.Column('coalesced_first', _TS, nullable=True,
                                    comment='COALESCE: earliest missed nominal time'))
    op.add_column('jobs', sa.Column('coalesced_last', _TS, nullable=True,
                                    comment='COALESCE: latest missed nominal time'))
    op.create_index('ix_jobs_schedule_uid_state', 'jobs', ['schedule_uid', 'state'])
    bind = op.get_bind()
    for table in (schedules, schedule_occurrences, catchup_budget):
        table.create(bind)


def downgrade() -> None:
    bind = op.get_bind()
    for table in (catchup_budget, schedule_occurrences, schedules):
        table.drop(bind)
    op.drop_index('ix_jobs_schedule_uid_state', 'jobs')
    for col in ('coalesced_last', 'coalesced_first', 'coalesced_count', 'nominal_time', 'schedule_id', 'schedule_uid'):
        op.drop_column('jobs', col)
