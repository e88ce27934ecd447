"""schema: jobs.trace_context, the W3C trace context of a job's create span (NULL: not traced)

Written by the API (and the planner for occurrences) only while tracing is on
(``GNOMON_TRACES_EXPORTER``); the dispatcher continues it for every attempt (docs/tracing.md). A
nullable column without a default: adding it rewrites nothing on PostgreSQL or CockroachDB.

Revision ID: 0015
Revises: 0014
"""
from alembic import op
import sqlalchemy as sa

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        'jobs',
        sa.Column(
            'trace_context',
            sa.Text(),
            nullable=True,
            comment='W3C traceparent, then a newline and the tracestate if any; NULL: not traced',
        ),
    )


def downgrade() -> None:
    op.drop_column('jobs', 'trace_context')
