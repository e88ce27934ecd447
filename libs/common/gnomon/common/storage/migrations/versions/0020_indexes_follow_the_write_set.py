"""schema: the indexes follow the write set (partial to the states that read them, one open-attempts
index, fillfactor on attempts, claims counted per queue and second)

An update that changes no indexed column (index keys and partial-index predicates alike) can be a
HOT update and writes no index entry; any other update adds an entry to every index whose predicate
the new row meets. Per job of a drain the per-job path made five non-HOT updates and 27 index entries,
16 of them re-inserts of keys that had not changed (docs/architecture.md, "Indexes and the write set").

* ``jobs``: request-id uniqueness becomes the unique index ``uq_jobs_request_id`` ``WHERE request_id IS
  NOT NULL`` (the creates say ``ON CONFLICT (namespace, request_id) WHERE request_id IS NOT NULL``); the
  state/finished index becomes ``ix_jobs_pending_dead``, partial to SCHEDULED, QUEUED and DEAD (the
  namespace quota and the DLQ); the schedule index keeps only active occurrences.
* ``attempts``: ``ix_attempts_open`` (``WHERE finished_at IS NULL``) replaces the lease index (on
  ``state`` and ``lease_expires_at``) and the outbox index (on ``state``), so no index holds a column the
  accept or the heartbeat writes; ``fillfactor = 50`` leaves room on each page for a new version of each row (a batched accept
  updates every attempt of a page in one statement; measured: 80 made 0.22 of its 2 updates per job HOT, 50 made 0.96)
  (PostgreSQL only: CockroachDB has no fillfactor). Existing pages fill up to the old 100 % until
  they are rewritten; new attempts get the room.

* ``queue_claims``: attempts claimed per (region, namespace, queue, second, dispatcher), written by
  the claim statement, read by the retry budget (the breaker's probes: finished and open attempts); it replaces the
  ``attempts (region, namespace, queue, claimed_at)`` index (two entries per attempt: the claim's
  insert and the result's re-insert of the unchanged key). Filled from the attempts of the last
  3,660 s (the longest budget window and a minute) before that index is dropped.

Order of a rolling upgrade (docs/operations.md): the api first (its ``ON CONFLICT ... WHERE
request_id IS NOT NULL`` also infers the old full unique constraint; the previous release's ``ON
CONFLICT (namespace, request_id)`` cannot infer the partial index), then this migration, then the
dispatchers (their claim writes ``queue_claims``).

Revision ID: 0020
Revises: 0018
"""
from alembic import op
import sqlalchemy as sa

revision = '0020'
down_revision = '0018'
branch_labels = None
depends_on = None

_ACTIVE = "('SCHEDULED', 'QUEUED', 'RUNNING')"
_PENDING_DEAD = "('SCHEDULED', 'QUEUED', 'DEAD')"


def _postgresql() -> bool:
    return op.get_bind().dialect.name == 'postgresql'


def upgrade() -> None:
    op.create_index(
        'uq_jobs_request_id', 'jobs', ['namespace', 'request_id'], unique=True,
        postgresql_where=sa.text('request_id IS NOT NULL'),
    )
    op.drop_constraint('uq_jobs_namespace_request_id', 'jobs', type_='unique')
    op.create_index(
        'ix_jobs_pending_dead', 'jobs', ['namespace', 'state', 'finished_at'],
        postgresql_where=sa.text(f'state IN {_PENDING_DEAD}'),
    )
    op.drop_index('ix_jobs_namespace_state_finished_at', table_name='jobs')
    op.drop_index('ix_jobs_schedule', table_name='jobs')
    op.create_index(
        'ix_jobs_schedule', 'jobs', ['schedule_uid', 'state'],
        postgresql_where=sa.text(f'schedule_uid IS NOT NULL AND state IN {_ACTIVE}'),
    )
    op.create_index(
        'ix_attempts_open', 'attempts', ['region', 'shard', 'claimed_at'],
        postgresql_where=sa.text('finished_at IS NULL'),
    )
    op.drop_index('ix_attempts_running_lease', table_name='attempts')
    op.drop_index('ix_attempts_queued', table_name='attempts')
    op.create_table(
        'queue_claims',
        sa.Column('region', sa.String(length=32), nullable=False),
        sa.Column('namespace', sa.String(length=63), nullable=False),
        sa.Column('queue', sa.String(length=64), nullable=False),
        sa.Column('bucket_start', sa.DateTime(timezone=True), nullable=False,
                  comment="the claims' second: date_trunc('second', now())"),
        sa.Column('dispatcher_id', sa.String(length=128), nullable=False, comment='the claiming dispatcher'),
        sa.Column('first_attempts', sa.BigInteger(), nullable=False, comment='attempts numbered 1 claimed'),
        sa.Column('retries', sa.BigInteger(), nullable=False, comment='attempts numbered 2 and up claimed'),
        sa.PrimaryKeyConstraint(
            'region', 'namespace', 'queue', 'bucket_start', 'dispatcher_id', name=op.f('pk_queue_claims')
        ),
    )
    op.create_index('ix_queue_claims_bucket', 'queue_claims', ['region', 'bucket_start'])
    # the claims of the longest budget window so far, from the attempt rows (through their
    # claimed_at index, dropped right after)
    op.execute(
        "INSERT INTO queue_claims (region, namespace, queue, bucket_start, dispatcher_id, first_attempts, retries) "
        "SELECT region, namespace, queue, date_trunc('second', claimed_at), dispatcher_id, "
        "sum(CASE WHEN attempt = 1 THEN 1 ELSE 0 END), sum(CASE WHEN attempt > 1 THEN 1 ELSE 0 END) "
        "FROM attempts WHERE claimed_at >= now() - interval '3660 seconds' GROUP BY 1, 2, 3, 4, 5"
    )
    op.drop_index('ix_attempts_region_namespace_queue_claimed_at', table_name='attempts')
    if _postgresql():
        op.execute('ALTER TABLE attempts SET (fillfactor = 50)')
        op.execute('ALTER TABLE queue_claims SET (fillfactor = 50)')


def downgrade() -> None:
    if _postgresql():
        op.execute('ALTER TABLE attempts RESET (fillfactor)')
    op.create_index(
        'ix_attempts_region_namespace_queue_claimed_at', 'attempts', ['region', 'namespace', 'queue', 'claimed_at']
    )
    op.drop_index('ix_queue_claims_bucket', table_name='queue_claims')
    op.drop_table('queue_claims')
    op.create_index(
        'ix_attempts_queued', 'attempts', ['region', 'shard', 'claimed_at'],
        postgresql_where=sa.text("state = 'QUEUED'"),
    )
    op.create_index(
        'ix_attempts_running_lease', 'attempts', ['region', 'lease_expires_at'],
        postgresql_where=sa.text("state = 'RUNNING'"),
    )
    op.drop_index('ix_attempts_open', table_name='attempts')
    op.drop_index('ix_jobs_schedule', table_name='jobs')
    op.create_index(
        'ix_jobs_schedule', 'jobs', ['schedule_uid', 'state'], postgresql_where=sa.text('schedule_uid IS NOT NULL')
    )
    op.create_index('ix_jobs_namespace_state_finished_at', 'jobs', ['namespace', 'state', 'finished_at'])
    op.drop_index('ix_jobs_pending_dead', table_name='jobs')
    op.create_unique_constraint('uq_jobs_namespace_request_id', 'jobs', ['namespace', 'request_id'])
    op.drop_index('uq_jobs_request_id', table_name='jobs')
