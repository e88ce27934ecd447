"""Queues (``gnomon.v1.QueueService``): health (circuit breaker, retry budget, due backlog) and the
dispatch rate limit."""

from __future__ import annotations

from gnomon._proto.gnomon.v1 import queue_service_pb2

from . import convert
from .base import ClientBase
from .models import Queue

__all__ = ["QueuesClient", "queue_name"]


def queue_name(queue: str, namespace: str) -> str:
    """``"emails"`` -> ``"namespaces/<namespace>/queues/emails"``; a full name is returned unchanged.

    Raises:
        ValueError: an empty or malformed name.
    """
    if queue.startswith("namespaces/"):
        parts = queue.split("/")
        if len(parts) != 4 or parts[2] != "queues" or not parts[1] or not parts[3]:
            raise ValueError(f"not a queue name: {queue!r} (namespaces/{{ns}}/queues/{{queue}})")
        return queue
    if not queue or "/" in queue:
        raise ValueError(f"not a queue name: {queue!r}")
    return f"{convert.namespace_parent(namespace)}/queues/{queue}"


class QueuesClient(ClientBase):
    """The queue methods of :class:`~gnomon.sdk.AsyncClient` (``QueueService``)."""

    async def get_queue(self, queue: str) -> Queue:
        """Reads a queue's health: circuit breaker state, retry budget, due backlog. ``queue`` is a
        queue id of this client's namespace or ``namespaces/{ns}/queues/{queue}``.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` for a malformed name, ``UNAVAILABLE``, ...
            ValueError: an empty or malformed name.
        """
        req = queue_service_pb2.GetQueueRequest(name=queue_name(queue, self.namespace))
        return convert.queue_from_proto((await self._call(self._queues.GetQueue, req)).queue)

    async def set_queue_rate_limit(self, queue: str, rate: float, burst: int = 0) -> Queue:
        """Sets the queue's dispatch rate limit (``rate`` dispatches per second shared by all
        dispatchers of the region, ``burst`` at once; 0 = rate rounded up); ``rate=0`` removes it.
        Returns the queue afterwards.

        Raises:
            GnomonError: ``INVALID_ARGUMENT`` (negative rate or burst, malformed name), ...
            ValueError: an empty or malformed name.
        """
        req = queue_service_pb2.SetQueueRateLimitRequest(
            name=queue_name(queue, self.namespace), rate=rate, burst=burst
        )
        return convert.queue_from_proto((await self._call(self._queues.SetQueueRateLimit, req)).queue)
