"""tenancy: namespaces, principals, api_keys, grants; audit_log gains resource, outcome and peer

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'namespaces',
        sa.Column('name', sa.String(length=63), nullable=False,
                  comment='the namespace id (resource name namespaces/{name})'),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('retention_s', sa.BigInteger(), nullable=False,
                  comment='finished jobs are kept this long, seconds'),
        sa.Column('max_create_rate', sa.Double(), nullable=False,
                  comment='jobs created per second per API process'),
        sa.Column('max_pending_jobs', sa.BigInteger(), nullable=False,
                  comment='jobs SCHEDULED or QUEUED at once'),
        sa.Column('max_schedules', sa.Integer(), nullable=False, comment='schedules at once'),
        sa.Column('max_worker_streams', sa.Integer(), nullable=False,
                  comment='worker streams per dispatcher process'),
        sa.Column('max_queues_per_hello', sa.Integer(), nullable=False,
                  comment='queues one worker stream may name'),
        sa.Column('version', sa.BigInteger(), nullable=False, comment='bumped by every update (the etag)'),
        sa.Column('created_at', TS, nullable=False),
        sa.Column('updated_at', TS, nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_namespaces')))
    op.create_table(
        'principals',
        sa.Column('name', sa.String(length=128), nullable=False,
                  comment='also the CN of its client certificate, if any'),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('created_at', TS, nullable=False),
        sa.Column('disabled_at', TS, nullable=True, comment='set: every credential of it is refused'),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_principals')))
    op.create_table(
        'api_keys',
        sa.Column('id', sa.String(length=32), nullable=False, comment='the public part of the key'),
        sa.Column('principal', sa.String(length=128), nullable=False),
        sa.Column('secret_sha256', sa.String(length=64), nullable=False,
                  comment='hex SHA-256 of the secret part'),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('created_at', TS, nullable=False),
        sa.Column('expires_at', TS, nullable=True),
        sa.Column('revoked_at', TS, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')))
    op.create_index(op.f('ix_api_keys_principal'), 'api_keys', ['principal'])
    op.create_table(
        'grants',
        sa.Column('principal', sa.String(length=128), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=False,
                  comment='a namespace id, or * for every namespace'),
        sa.Column('role', sa.String(length=16), nullable=False, comment='admin operator client worker reader'),
        sa.Column('queues', sa.Text(), nullable=False,
                  comment='worker role: JSON list of queue names, or ["*"]'),
        sa.Column('created_at', TS, nullable=False),
        sa.PrimaryKeyConstraint('principal', 'namespace', 'role', name=op.f('pk_grants')))
    op.create_index(op.f('ix_grants_namespace'), 'grants', ['namespace'])
    op.add_column('attempts', sa.Column(
        'owner', sa.String(length=128), nullable=True,
        comment='principal whose worker accepted it (migration 0011); only it may write to the attempt'))
    op.alter_column('audit_log', 'actor', comment='the authenticated principal (never client-claimed)',
                    existing_type=sa.String(length=512), existing_nullable=False)
    op.alter_column('audit_log', 'action', comment='the RPC method, e.g. CreateJob',
                    existing_type=sa.String(length=64), existing_nullable=False)
    op.add_column('audit_log', sa.Column('resource', sa.String(length=512), server_default='', nullable=False,
                                         comment='the resource name acted on'))
    op.add_column('audit_log', sa.Column('outcome', sa.String(length=32), server_default='OK', nullable=False,
                                         comment='gRPC status code name'))
    op.add_column('audit_log', sa.Column('peer', sa.String(length=128), server_default='', nullable=False,
                                         comment="the caller's address"))


def downgrade() -> None:
    op.drop_column('attempts', 'owner')
    for col in ('peer', 'outcome', 'resource'):
        op.drop_column('audit_log', col)
    op.drop_index(op.f('ix_grants_namespace'), table_name='grants')
    op.drop_table('grants')
    op.drop_index(op.f('ix_api_keys_principal'), table_name='api_keys')
    op.drop_table('api_keys')
    op.drop_table('principals')
    op.drop_table('namespaces')
