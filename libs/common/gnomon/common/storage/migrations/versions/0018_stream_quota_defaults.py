"""schema: worker-stream quotas default from the dispatcher's config (NULL = the default)

``namespaces.max_worker_streams`` and ``max_queues_per_hello`` become nullable, and their 0 (which
meant "no limit" and was what every namespace got unless set) becomes NULL: every namespace, old or
new, now gets the defaults ``GNOMON_STREAM_QUOTA_*`` unless it sets its own. Three new nullable
quotas (NULL = the default): ``max_worker_streams_per_principal``, ``max_queues_per_principal``,
``max_streamed_queues``. docs/security.md, "Limits and quotas".

Revision ID: 0018
Revises: 0016
"""
from alembic import op
import sqlalchemy as sa

revision = '0018'
down_revision = '0016'
branch_labels = None
depends_on = None

_NEW = (
    ('max_worker_streams_per_principal', 'worker streams of one principal per dispatcher process; NULL: default'),
    ('max_queues_per_principal', "distinct queues one principal's streams serve per dispatcher; NULL: default"),
    ('max_streamed_queues', "distinct queues the namespace's streams serve per dispatcher; NULL: default"),
)


def upgrade() -> None:
    op.alter_column(
        'namespaces', 'max_worker_streams', existing_type=sa.Integer(), nullable=True,
        comment='worker streams per dispatcher process; NULL: the default',
    )
    op.alter_column(
        'namespaces', 'max_queues_per_hello', existing_type=sa.Integer(), nullable=True,
        comment='queues one worker stream may name; NULL: the default',
    )
    op.execute("UPDATE namespaces SET max_worker_streams = NULL WHERE max_worker_streams = 0")
    op.execute("UPDATE namespaces SET max_queues_per_hello = NULL WHERE max_queues_per_hello = 0")
    for name, comment in _NEW:
        op.add_column('namespaces', sa.Column(name, sa.Integer(), nullable=True, comment=comment))


def downgrade() -> None:
    for name, _ in _NEW:
        op.drop_column('namespaces', name)
    op.execute("UPDATE namespaces SET max_worker_streams = 0 WHERE max_worker_streams IS NULL")
    op.execute("UPDATE namespaces SET max_queues_per_hello = 0 WHERE max_queues_per_hello IS NULL")
    op.alter_column(
        'namespaces', 'max_worker_streams', existing_type=sa.Integer(), nullable=False,
        comment='worker streams per dispatcher process',
    )
    op.alter_column(
        'namespaces', 'max_queues_per_hello', existing_type=sa.Integer(), nullable=False,
        comment='queues one worker stream may name',
    )
