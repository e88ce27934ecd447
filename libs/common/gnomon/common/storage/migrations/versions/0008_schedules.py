"""recurring schedules: schedules, schedule_occurrences (decision records), catchup_budget; occurrence
columns on jobs

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

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
    op.create_table('schedules',
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('schedule_id', sa.String(length=63), nullable=False),
    sa.Column('uid', sa.Uuid(), nullable=False, comment='fixed at creation; occurrence job ids derive from it'),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('rule_kind', sa.String(length=16), nullable=False, comment='CRON RRULE INTERVAL'),
    sa.Column('expression', sa.Text(), nullable=False, comment='cron or RFC 5545 text; empty for INTERVAL'),
    sa.Column('interval_ms', sa.BigInteger(), nullable=True),
    sa.Column('time_zone', sa.String(length=64), nullable=False),
    sa.Column('dst_gap', sa.String(length=16), nullable=False),
    sa.Column('dst_fold', sa.String(length=16), nullable=False),
    sa.Column('start_time', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_time', sa.DateTime(timezone=True), nullable=True),
    sa.Column('misfire_policy', sa.String(length=16), nullable=False),
    sa.Column('misfire_grace_ms', sa.BigInteger(), nullable=False),
    sa.Column('catchup_window_ms', sa.BigInteger(), nullable=False),
    sa.Column('max_catchup', sa.Integer(), nullable=False),
    sa.Column('overlap_policy', sa.String(length=16), nullable=False),
    sa.Column('jitter_ms', sa.BigInteger(), nullable=False),
    sa.Column('queue', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.LargeBinary(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('lease_ms', sa.Integer(), nullable=False),
    sa.Column('idempotent', sa.Boolean(), nullable=False),
    sa.Column('start_to_close_ms', sa.BigInteger(), nullable=True),
    sa.Column('start_deadline_ms', sa.BigInteger(), nullable=True),
    sa.Column('retry_initial_ms', sa.BigInteger(), nullable=False),
    sa.Column('retry_max_ms', sa.BigInteger(), nullable=False),
    sa.Column('retry_multiplier', sa.Double(), nullable=False),
    sa.Column('retry_jitter', sa.Double(), nullable=False),
    sa.Column('max_age_ms', sa.BigInteger(), nullable=True),
    sa.Column('non_retryable_errors', sa.Text(), nullable=True),
    sa.Column('paused', sa.Boolean(), nullable=False),
    sa.Column('skip_through', sa.DateTime(timezone=True), nullable=True, comment='nominal times up to this instant were paused: SKIPPED_PAUSED'),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('request_id', sa.Uuid(), nullable=True),
    sa.Column('request_hash', sa.String(length=64), nullable=True),
    sa.Column('planned_through', sa.DateTime(timezone=True), nullable=False, comment='high-water mark: every nominal time up to this instant is planned'),
    sa.Column('next_fire_at', sa.DateTime(timezone=True), nullable=True, comment='first nominal time after planned_through; NULL = exhausted'),
    sa.Column('plan_at', sa.DateTime(timezone=True), nullable=True, comment='when a planner must look at it next; NULL = paused or exhausted'),
    sa.Column('buffered', sa.Integer(), nullable=False, comment='occurrences waiting (BUFFERED) to be released'),
    sa.Column('missed_count', sa.Integer(), nullable=False, comment='COALESCE: missed nominal times carried over from earlier planning steps'),
    sa.Column('missed_first', sa.DateTime(timezone=True), nullable=True, comment='COALESCE: earliest of those'),
    sa.PrimaryKeyConstraint('namespace', 'schedule_id', name=op.f('pk_schedules')),
    sa.UniqueConstraint('namespace', 'request_id', name=op.f('uq_schedules_namespace_request_id')),
    sa.UniqueConstraint('uid', name=op.f('uq_schedules_uid'))
    )
    op.create_table('schedule_occurrences',
    sa.Column('schedule_uid', sa.Uuid(), nullable=False),
    sa.Column('nominal_time', sa.DateTime(timezone=True), nullable=False),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('local_time', sa.String(length=40), nullable=False, comment='RFC 3339 local wall time with offset'),
    sa.Column('decision', sa.String(length=24), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False, comment='RULE TRIGGER BACKFILL'),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('job_id', sa.Uuid(), nullable=True),
    sa.Column('scheduled_at', sa.DateTime(timezone=True), nullable=True, comment="the job's schedule time"),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('overlap_policy', sa.String(length=16), nullable=True, comment='BUFFERED: the policy it is released under'),
    sa.Column('missed_count', sa.Integer(), nullable=True),
    sa.Column('missed_first', sa.DateTime(timezone=True), nullable=True),
    sa.Column('missed_last', sa.DateTime(timezone=True), nullable=True),
    sa.Column('request_id', sa.Uuid(), nullable=True, comment='TriggerSchedule request_id: a repeat returns this record'),
    sa.PrimaryKeyConstraint('schedule_uid', 'nominal_time', name=op.f('pk_schedule_occurrences')),
    sa.UniqueConstraint('schedule_uid', 'request_id', name=op.f('uq_schedule_occurrences_schedule_uid_request_id'))
    )
    op.create_table('catchup_budget',
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('next_slot_at', sa.DateTime(timezone=True), nullable=False, comment='the earliest instant the next catch-up run may be released'),
    sa.PrimaryKeyConstraint('region', name=op.f('pk_catchup_budget'))
    )
    op.create_index(op.f('ix_schedules_region_buffered'), 'schedules', ['region', 'buffered'], unique=False)
    op.create_index(op.f('ix_schedules_region_plan_at'), 'schedules', ['region', 'plan_at'], unique=False)
    op.create_index(op.f('ix_schedule_occurrences_region_decided_at'), 'schedule_occurrences', ['region', 'decided_at'], unique=False)
    op.create_index(op.f('ix_schedule_occurrences_schedule_uid_decision_nominal_time'), 'schedule_occurrences', ['schedule_uid', 'decision', 'nominal_time'], unique=False)


def downgrade() -> None:
    for table in ('catchup_budget', 'schedule_occurrences', 'schedules'):
        op.drop_table(table)
    op.drop_index('ix_jobs_schedule_uid_state', 'jobs')
    for col in ('coalesced_last', 'coalesced_first', 'coalesced_count', 'nominal_time', 'schedule_id', 'schedule_uid'):
        op.drop_column('jobs', col)
