"""initial schema: jobs, attempts, outbox, shard_owners

Revision ID: 0001
Revises: 
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('attempts',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('shard', sa.Integer(), nullable=False),
    sa.Column('token', sa.BigInteger(), nullable=False, comment='fencing token it was claimed (or re-published) under'),
    sa.Column('version', sa.BigInteger(), nullable=False, comment='job version at claim'),
    sa.Column('state', sa.String(length=16), nullable=False, comment='QUEUED RUNNING SUCCEEDED FAILED LOST CANCELLED'),
    sa.Column('dispatcher_id', sa.String(length=128), nullable=False),
    sa.Column('worker_id', sa.String(length=128), nullable=True),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('accepted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('lease_ms', sa.Integer(), nullable=False, comment='lease duration, ms; each heartbeat extends by it'),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('failure_class', sa.String(length=16), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('job_id', 'attempt', name=op.f('pk_attempts'))
    )
    op.create_index(op.f('ix_attempts_region_state_lease_expires_at'), 'attempts', ['region', 'state', 'lease_expires_at'], unique=False)
    op.create_table('jobs',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('shard', sa.Integer(), nullable=False, comment='job hash mod S: the due-index slice'),
    sa.Column('queue', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.LargeBinary(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False, comment='bumped by every transition'),
    sa.Column('scheduled_at', sa.DateTime(timezone=True), nullable=False, comment='eligible from this instant (UTC)'),
    sa.Column('deadline', sa.DateTime(timezone=True), nullable=True),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False, comment='current/last attempt number, 0 before the first claim'),
    sa.Column('idempotency_key', sa.String(length=255), nullable=False),
    sa.Column('lease_ms', sa.Integer(), nullable=False, comment='lease duration per attempt, ms'),
    sa.Column('request_id', sa.Uuid(), nullable=True),
    sa.Column('request_hash', sa.String(length=64), nullable=True, comment='sha256 of the create request, for request_id reuse'),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('namespace', 'request_id', name=op.f('uq_jobs_namespace_request_id'))
    )
    op.create_index(op.f('ix_jobs_namespace_created_at'), 'jobs', ['namespace', 'created_at'], unique=False)
    op.create_index(op.f('ix_jobs_region_state_scheduled_at_shard'), 'jobs', ['region', 'state', 'scheduled_at', 'shard'], unique=False)
    op.create_table('outbox',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('shard', sa.Integer(), nullable=False),
    sa.Column('token', sa.BigInteger(), nullable=False),
    sa.Column('queue', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('published_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('publish_count', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('job_id', 'attempt', name=op.f('pk_outbox'))
    )
    op.create_index(op.f('ix_outbox_region_published_at_shard'), 'outbox', ['region', 'published_at', 'shard'], unique=False)
    op.create_table('shard_owners',
    sa.Column('region', sa.String(length=32), nullable=False),
    sa.Column('shard', sa.Integer(), nullable=False),
    sa.Column('token', sa.BigInteger(), nullable=False, comment='etcd create revision of the ownership key'),
    sa.Column('owner', sa.String(length=128), nullable=False),
    sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('region', 'shard', name=op.f('pk_shard_owners'))
    )


def downgrade() -> None:
    op.drop_table('shard_owners')
    op.drop_index(op.f('ix_outbox_region_published_at_shard'), table_name='outbox')
    op.drop_table('outbox')
    op.drop_index(op.f('ix_jobs_region_state_scheduled_at_shard'), table_name='jobs')
    op.drop_index(op.f('ix_jobs_namespace_created_at'), table_name='jobs')
    op.drop_table('jobs')
    op.drop_index(op.f('ix_attempts_region_state_lease_expires_at'), table_name='attempts')
    op.drop_table('attempts')
