"""schema: partial indexes on the hot path, and an index for the retention scan

Every state change of a job or an attempt is a non-HOT update (``state`` is indexed), so PostgreSQL
adds an entry to every index of the table, unless a partial index's predicate excludes the new row.
A job passes SCHEDULED -> QUEUED -> RUNNING -> SUCCEEDED; only its SCHEDULED version belongs in the
due index, only jobs with a deadline in the deadline index, only occurrences in the schedule index.
Attempts: only RUNNING ones in the lease-expiry index, only finished ones in the breaker's index.
Per job of a drain, index entries written go from 41 to 27 (bench/README.md). The retention scan (reaper) gets
``ix_jobs_finished`` instead of scanning every terminal job of the region on each sweep.

Revision ID: 0014
Revises: 0013
"""
from alembic import op
import sqlalchemy as sa

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        'ix_jobs_due', 'jobs', ['region', 'namespace', 'queue', 'scheduled_at', 'shard'],
        postgresql_where=sa.text("state = 'SCHEDULED'"),
    )
    op.drop_index('ix_jobs_region_namespace_queue_state_scheduled_at_shard', table_name='jobs')
    op.create_index(
        'ix_jobs_deadline', 'jobs', ['region', 'deadline'],
        postgresql_where=sa.text("state = 'SCHEDULED' AND deadline IS NOT NULL"),
    )
    op.drop_index('ix_jobs_region_state_deadline', table_name='jobs')
    op.create_index(
        'ix_jobs_schedule', 'jobs', ['schedule_uid', 'state'], postgresql_where=sa.text("schedule_uid IS NOT NULL")
    )
    op.drop_index('ix_jobs_schedule_uid_state', table_name='jobs')
    op.create_index(
        'ix_jobs_finished', 'jobs', ['region', 'finished_at'], postgresql_where=sa.text("finished_at IS NOT NULL")
    )
    op.create_index(
        'ix_attempts_running_lease', 'attempts', ['region', 'lease_expires_at'],
        postgresql_where=sa.text("state = 'RUNNING'"),
    )
    op.drop_index('ix_attempts_region_state_lease_expires_at', table_name='attempts')
    op.create_index(
        'ix_attempts_finished', 'attempts', ['region', 'namespace', 'queue', 'finished_at'],
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )
    op.drop_index('ix_attempts_region_namespace_queue_finished_at', table_name='attempts')


def downgrade() -> None:
    op.create_index(
        'ix_attempts_region_namespace_queue_finished_at', 'attempts', ['region', 'namespace', 'queue', 'finished_at']
    )
    op.drop_index('ix_attempts_finished', table_name='attempts')
    op.create_index('ix_attempts_region_state_lease_expires_at', 'attempts', ['region', 'state', 'lease_expires_at'])
    op.drop_index('ix_attempts_running_lease', table_name='attempts')
    op.drop_index('ix_jobs_finished', table_name='jobs')
    op.create_index('ix_jobs_schedule_uid_state', 'jobs', ['schedule_uid', 'state'])
    op.drop_index('ix_jobs_schedule', table_name='jobs')
    op.create_index('ix_jobs_region_state_deadline', 'jobs', ['region', 'state', 'deadline'])
    op.drop_index('ix_jobs_deadline', table_name='jobs')
    op.create_index(
        'ix_jobs_region_namespace_queue_state_scheduled_at_shard', 'jobs',
        ['region', 'namespace', 'queue', 'state', 'scheduled_at', 'shard'],
    )
    op.drop_index('ix_jobs_due', table_name='jobs')
