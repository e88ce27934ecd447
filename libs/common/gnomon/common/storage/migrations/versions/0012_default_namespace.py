"""data: the namespace row `default` (no quotas; jobs of an empty parent live there)

Revision ID: 0012
Revises: 0011
"""
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "INSERT INTO namespaces (name, description, retention_s, max_create_rate, max_pending_jobs, "
        "max_schedules, max_worker_streams, max_queues_per_hello, version, created_at, updated_at) "
        "VALUES ('default', 'The namespace of requests that name none.', 0, 0, 0, 0, 0, 0, 1, now(), now()) "
        "ON CONFLICT (name) DO NOTHING"
    )


def downgrade() -> None:
    op.execute("DELETE FROM namespaces WHERE name = 'default'")
