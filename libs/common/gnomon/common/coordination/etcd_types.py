"""The value and error types of the etcd client (:mod:`gnomon.common.coordination.etcd`): one key
as etcd stores it, the errors every call raises, and the prefix range rule."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import grpc.aio

from gnomon._proto.etcd.api import kv_pb2

__all__ = ["EtcdCompactedError", "EtcdError", "KeyValue", "prefix_range_end"]


@dataclass(frozen=True)
class KeyValue:
    """One key as etcd stores it (``mvccpb.KeyValue``).

    Attributes:
        key: the key.
        value: the value (empty for DELETE watch events).
        create_revision: cluster revision of the put that created this incarnation of the key. Unique and
            strictly increasing across incarnations, so it is the fencing token of whoever created it.
            For a DELETE watch event this is 0.
        mod_revision: cluster revision of the last modification (for DELETE events: the deletion's revision).
        version: number of puts since this incarnation was created (1 after the create; 0 once deleted).
        lease: id of the lease the key is attached to, 0 if none.
    """

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_pb(cls, kv: kv_pb2.KeyValue) -> KeyValue:
        """The value of an ``mvccpb.KeyValue`` message."""
        return cls(
            key=kv.key,
            value=kv.value,
            create_revision=kv.create_revision,
            mod_revision=kv.mod_revision,
            version=kv.version,
            lease=kv.lease,
        )


class EtcdError(Exception):
    """etcd could not do what was asked: transport failure, deadline, unavailable, or a server-side error.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``) when there was one, e.g. ``UNAVAILABLE``,
            ``DEADLINE_EXCEEDED``, ``NOT_FOUND`` (etcd's "requested lease not found"); ``None`` for
            errors reported inside an otherwise successful response (e.g. a cancelled watch).
        details: the server's or gRPC's message.

    The original ``grpc.aio.AioRpcError`` (if any) is chained as ``__cause__``. After an ``EtcdError``
    from a write (``put``, ``create_if_absent``, ...) the outcome is UNKNOWN: the write may or may not
    have been applied. Read back before drawing a conclusion.
    """

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None, details: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details

    @classmethod
    def from_rpc(cls, what: str, err: grpc.aio.AioRpcError) -> EtcdError:
        """The error for a failed RPC ``what`` (its status code and details kept)."""
        code = err.code()
        details = err.details() or ""
        return cls(f"etcd {what} failed: {code.name if code else '?'}: {details}", code=code, details=details)


class EtcdCompactedError(EtcdError):
    """A watch asked for history that etcd has compacted away.

    Attributes:
        compact_revision: the oldest revision still available; resume from it after re-reading state.
    """

    def __init__(self, message: str, *, compact_revision: int) -> None:
        super().__init__(message, code=None, details=message)
        self.compact_revision = compact_revision


def task_cancelled() -> bool:
    """True if the running task itself is being cancelled (as opposed to gRPC cancelling our call)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def closed_error(what: str) -> EtcdError:
    """The error a call ``what`` raises when the client was closed under it."""
    return EtcdError(f"etcd {what} cancelled: the client was closed", code=grpc.StatusCode.CANCELLED)


def prefix_range_end(prefix: bytes) -> bytes:
    """Return the exclusive ``range_end`` covering every key that starts with ``prefix``.

    The last byte that is not ``0xff`` is incremented and everything after it dropped
    (``b"a/"`` -> ``b"a0"``, ``b"a\\xff"`` -> ``b"b"``). An empty or all-``0xff`` prefix gives ``b"\\x00"``,
    which etcd reads as "every key >= key" (same rule as etcd's ``clientv3.GetPrefixRangeEnd``).
    """
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"
