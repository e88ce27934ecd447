"""schema: audit_log.count, how many calls an audit entry stands for

1 for every entry but refused calls coalesced by the API's audit writer (docs/security.md, "Audit":
a flood of refused calls of one principal, namespace, method and outcome within
GNOMON_AUDIT_COALESCE_S is one entry with a count). A constant default: adding it rewrites nothing on PostgreSQL 11+ or CockroachDB.

Revision ID: 0016
Revises: 0015
"""
from alembic import op
import sqlalchemy as sa

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        'audit_log',
        sa.Column(
            'count',
            sa.Integer(),
            nullable=False,
            server_default='1',
            comment='calls the entry stands for: 1, or refused calls coalesced (GNOMON_AUDIT_COALESCE_S)',
        ),
    )


def downgrade() -> None:
    op.drop_column('audit_log', 'count')
