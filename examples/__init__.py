"""Runnable examples of Gnomon handlers (not part of the ``gnomon`` distribution).

Run a worker on one with the repository root on ``PYTHONPATH``::

    PYTHONPATH=. gnomon worker --queue credits --handler examples.local_db_effect:handle

See docs/idempotency.md for what each one shows.
"""
