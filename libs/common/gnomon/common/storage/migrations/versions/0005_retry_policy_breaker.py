"""per-job retry policy, retry budget and circuit breaker state

jobs: the retry policy columns (defaults = the API's defaults, so existing jobs keep today's
behaviour: 1 s initial, 300 s cap, x2, full jitter) and ``first_dispatched_at`` (set by the claim
when NULL; ``max_age`` counts from it). attempts: ``namespace`` and ``queue`` (backfilled from the
job) with two indexes, so the retry budget (attempts claimed in a window) and the breaker (attempts
finished in a window) each read one queue's index range. queue_state: the per-queue breaker.

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column('jobs', sa.Column('retry_initial_ms', sa.BigInteger(), server_default=sa.text('1000'),
                                    nullable=False, comment='backoff before the first retry, ms'))
    op.add_column('jobs', sa.Column('retry_max_ms', sa.BigInteger(), server_default=sa.text('300000'),
                                    nullable=False, comment='backoff cap, ms'))
    op.add_column('jobs', sa.Column('retry_multiplier', sa.Double(), server_default=sa.text('2.0'), nullable=False,
                                    comment='backoff growth per retry'))
    op.add_column('jobs', sa.Column('retry_jitter', sa.Double(), server_default=sa.text('1.0'), nullable=False,
                                    comment='randomized fraction of each delay, 0..1'))
    op.add_column('jobs', sa.Column('max_age_ms', sa.BigInteger(), nullable=True,
                                    comment='no retry starts later than this after first_dispatched_at'))
    op.add_column('jobs', sa.Column('non_retryable_errors', sa.Text(), nullable=True,
                                    comment='JSON list of error type names never retried'))
    op.add_column('jobs', sa.Column('first_dispatched_at', TS, nullable=True,
                                    comment='set by the first claim; max_age counts from it'))
    # attempts.namespace / queue: added nullable, backfilled from the job, then NOT NULL
    op.add_column('attempts', sa.Column('namespace', sa.String(length=63), nullable=True))
    op.add_column('attempts', sa.Column('queue', sa.String(length=64), nullable=True))
    op.execute("UPDATE attempts SET namespace = jobs.namespace, queue = jobs.queue FROM jobs "
               "WHERE jobs.id = attempts.job_id")
    op.execute("DELETE FROM attempts WHERE namespace IS NULL")   # orphans (their job was pruned)
    op.alter_column('attempts', 'namespace', nullable=False)
    op.alter_column('attempts', 'queue', nullable=False)
    op.create_index(op.f('ix_attempts_region_namespace_queue_claimed_at'), 'attempts',
                    ['region', 'namespace', 'queue', 'claimed_at'], unique=False)
    op.create_index(op.f('ix_attempts_region_namespace_queue_finished_at'), 'attempts',
                    ['region', 'namespace', 'queue', 'finished_at'], unique=False)
    op.create_table(
        'queue_state',
        sa.Column('region', sa.String(length=32), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=False),
        sa.Column('queue', sa.String(length=64), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False, comment='CLOSED OPEN HALF_OPEN'),
        sa.Column('version', sa.BigInteger(), nullable=False,
                  comment='bumped by every state change (compare-and-set)'),
        sa.Column('opened_at', TS, nullable=True, comment='when the breaker last opened'),
        sa.Column('updated_at', TS, nullable=False,
                  comment="when the state last changed (the row's creation at first)"),
        sa.Column('failure_ratio', sa.Double(), server_default=sa.text('0'), nullable=False,
                  comment='failure ratio that made the last transition'),
        sa.Column('window_results', sa.Integer(), server_default=sa.text('0'), nullable=False,
                  comment='results counted for that ratio'),
        sa.Column('opened_count', sa.BigInteger(), server_default=sa.text('0'), nullable=False,
                  comment='times it opened'),
        sa.PrimaryKeyConstraint('region', 'namespace', 'queue', name=op.f('pk_queue_state')),
    )


def downgrade() -> None:
    op.drop_table('queue_state')
    op.drop_index(op.f('ix_attempts_region_namespace_queue_finished_at'), table_name='attempts')
    op.drop_index(op.f('ix_attempts_region_namespace_queue_claimed_at'), table_name='attempts')
    op.drop_column('attempts', 'queue')
    op.drop_column('attempts', 'namespace')
    for c in ('first_dispatched_at', 'non_retryable_errors', 'max_age_ms', 'retry_jitter', 'retry_multiplier',
              'retry_max_ms', 'retry_initial_ms'):
        op.drop_column('jobs', c)
