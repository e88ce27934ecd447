"""The planner's gRPC adapter: the internal ``HintService.WakePlanner`` (a hint; correctness never
depends on it)."""

from __future__ import annotations

import asyncio

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc


class PlannerHintServicer(hint_pb2_grpc.HintServiceServicer):
    """``WakePlanner`` sets ``wake`` so the planner plans now instead of at its next poll.
    ``WakeDispatcher`` is not served by a planner (UNIMPLEMENTED, the generated default)."""

    def __init__(self, wake: asyncio.Event):
        self.wake = wake

    async def WakePlanner(self, request, context):
        """A hint that a schedule changed: the planner plans now instead of at its next poll."""
        self.wake.set()
        return hint_pb2.WakePlannerResponse()
