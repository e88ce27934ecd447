"""Handlers for benchmark workers."""


async def noop(ctx) -> None:
    """Does nothing: measures Gnomon's own cost per job."""
