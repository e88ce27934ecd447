"""DLQ: audit log, replay records, provenance (filled by the DLQ work)

jobs.replay_of / jobs.replayed_by (provenance of replays), the index the DLQ walks
(namespace, state, finished_at), table audit_log (who/when/why/what of operator actions) and
table dlq_replays (idempotency and progress of ReplayDeadLetters by request_id).

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('replay_of', sa.Uuid(), nullable=True,
                                    comment='DLQ provenance: the dead job this job replays'))
    op.add_column('jobs', sa.Column('replayed_by', sa.Uuid(), nullable=True,
                                    comment='DLQ provenance: the job replaying this dead job'))
    op.create_index(op.f('ix_jobs_namespace_state_finished_at'), 'jobs', ['namespace', 'state', 'finished_at'],
                    unique=False)
    op.create_table(
        'audit_log',
        sa.Column('id', sa.Uuid(), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('actor', sa.String(length=512), nullable=False,
                  comment='x-gnomon-actor metadata (if sent) and the gRPC peer'),
        sa.Column('action', sa.String(length=64), nullable=False),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('request_id', sa.Uuid(), nullable=True),
        sa.Column('details', sa.Text(), nullable=False, comment='JSON object: filter, limits, counts'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log')),
    )
    op.create_index(op.f('ix_audit_log_namespace_created_at'), 'audit_log', ['namespace', 'created_at'], unique=False)
    op.create_table(
        'dlq_replays',
        sa.Column('namespace', sa.String(length=63), nullable=False),
        sa.Column('request_id', sa.Uuid(), nullable=False),
        sa.Column('request_hash', sa.String(length=64), nullable=False,
                  comment='sha256 of the request without its reason'),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False,
                  comment='start of the replay; only dead letters finished by then are matched'),
        sa.Column('matched', sa.Integer(), nullable=False,
                  comment='dead letters matching at the start (counted up to 100000)'),
        sa.Column('target', sa.Integer(), nullable=False, comment='how many the replay takes: min(matched, max_jobs)'),
        sa.Column('replayed', sa.Integer(), nullable=False, comment='new jobs created so far'),
        sa.Column('next_at', sa.DateTime(timezone=True), nullable=False,
                  comment='earliest schedule time of the next replayed job (pacing)'),
        sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('job_names', sa.Text(), nullable=False, comment='JSON list: names of the first 1000 new jobs'),
        sa.PrimaryKeyConstraint('namespace', 'request_id', name=op.f('pk_dlq_replays')),
    )


def downgrade() -> None:
    op.drop_table('dlq_replays')
    op.drop_index(op.f('ix_audit_log_namespace_created_at'), table_name='audit_log')
    op.drop_table('audit_log')
    op.drop_index(op.f('ix_jobs_namespace_state_finished_at'), table_name='jobs')
    op.drop_column('jobs', 'replayed_by')
    op.drop_column('jobs', 'replay_of')
