"""The dispatcher's internal hint service."""

from __future__ import annotations

import asyncio

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc


class HintServicer(hint_pb2_grpc.HintServiceServicer):
    """``gnomon.internal.v1.HintService``: wakes the claim loop."""

    def __init__(self, wake: asyncio.Event):
        self.wake = wake

    async def WakeDispatcher(self, request, context):
        """A hint that a job is due soon: wakes the claim loop now (correctness never depends on it)."""
        self.wake.set()
        return hint_pb2.WakeDispatcherResponse()
