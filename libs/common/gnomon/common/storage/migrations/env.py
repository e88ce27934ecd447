"""Alembic environment: runs migrations on the configured URL (sync engine)."""

from alembic import context
from sqlalchemy import create_engine, pool

from gnomon.common.storage.schema import metadata

url = context.config.get_main_option("sqlalchemy.url")
if url is None:
    raise RuntimeError("alembic: sqlalchemy.url is not configured")
engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
