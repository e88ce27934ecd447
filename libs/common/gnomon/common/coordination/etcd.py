"""A thin asyncio etcd v3 client over our own generated stubs (``gnomon._proto.etcd.api``).

Why not an etcd client library: ``docs/adr/0002-etcd-client.md``. In short, we need full control
over retries (a ``Txn`` must never be retried behind the caller's back) and over when a lease
stops being trusted.

Scope: exactly what the dispatcher's ownership/fencing path needs (Range, Put, DeleteRange, Txn,
LeaseGrant/Revoke/KeepAlive, Watch). Keeping one lease alive and telling its holder when to stop
acting on it is :class:`gnomon.common.coordination.lease_keeper.LeaseKeeper`; the error and value
types are in :mod:`gnomon.common.coordination.etcd_types`.

Conventions used throughout:

* Keys and values are ``bytes``. Revisions, versions and lease ids are etcd's ``int64`` numbers.
  A lease id of ``0`` means "no lease".
* Every unary call carries a gRPC deadline of ``EtcdClient.timeout`` seconds.
* Every transport or server failure is raised as :class:`EtcdError` (the ``grpc.aio.AioRpcError``
  is kept as ``__cause__`` and its status code as :attr:`EtcdError.code`).
* Nothing here retries an RPC. gRPC's own *transparent* retry (only for RPCs that never reached
  the server) stays on; it cannot duplicate a write.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, cast

import grpc
import grpc.aio
from google.protobuf.message import Message

from gnomon._proto.etcd.api import kv_pb2, rpc_pb2, rpc_pb2_grpc
from gnomon.common.config import EtcdSettings
from gnomon.common.coordination.etcd_auth import TokenPlugin, etcd_credentials
from gnomon.common.coordination.etcd_types import (
    EtcdCompactedError,
    EtcdError,
    KeyValue,
    closed_error,
    prefix_range_end,
    task_cancelled,
)

log = logging.getLogger(__name__)


def _target(endpoints: list[str]) -> tuple[str, list[tuple[str, object]]]:
    """Build the gRPC target string and channel options for ``endpoints`` (each ``host:port``)."""
    if not endpoints:
        raise ValueError("EtcdClient needs at least one endpoint ('host:port')")
    for ep in endpoints:
        if "://" in ep:
            raise ValueError(f"etcd endpoint {ep!r}: give 'host:port' without a scheme")
        host, sep, port = ep.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {ep!r} is not 'host:port'")
    if len(endpoints) == 1:
        return endpoints[0], []
    # Several endpoints: one channel with a static address list and round-robin balancing. gRPC's
    # ipv4:/ipv6: schemes take literal addresses only; DNS names cannot be listed this way.
    families = set()
    for ep in endpoints:
        host = ep.rpartition(":")[0].strip("[]")
        try:
            families.add(ipaddress.ip_address(host).version)
        except ValueError:
            raise ValueError(
                f"etcd endpoint {ep!r}: with several endpoints each host must be an IP literal "
                "(gRPC 'ipv4:'/'ipv6:' targets); use one DNS name that resolves to all members instead"
            ) from None
    if families != {4} and families != {6}:
        raise ValueError("etcd endpoints mix IPv4 and IPv6 addresses; use one family")
    scheme = "ipv4:" if families == {4} else "ipv6:"
    return scheme + ",".join(endpoints), [("grpc.lb_policy_name", "round_robin")]


class EtcdClient:
    """An asyncio etcd v3 client (one ``grpc.aio`` channel; create and use it inside one event loop).

    Args:
        endpoints: etcd client addresses as ``"host:port"`` (no scheme). One endpoint is used
            as the gRPC target as is. Several endpoints must be IP literals of one family and become the
            target ``"ipv4:h1:p1,h2:p2"`` (or ``ipv6:``) with the ``round_robin`` load-balancing policy.
        timeout: gRPC deadline in seconds for every unary call and for each keepalive round trip.
        credentials: TLS (and etcd user token) credentials, None for plaintext; ``token``: the
            :class:`~gnomon.common.coordination.etcd_auth.TokenPlugin` inside them, told when etcd
            refuses its token. :meth:`from_settings` builds both from ``GNOMON_ETCD_*``.

    Raises:
        ValueError: an endpoint is malformed, or several endpoints are not all IP literals of one family.

    The channel is opened lazily on first use; :meth:`close` (or ``async with``) releases it.
    """

    def __init__(
        self,
        endpoints: list[str],
        *,
        timeout: float = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
        token: TokenPlugin | None = None,
        server_name: str = "",
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self._target, self._options = _target(list(endpoints))
        if server_name:
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self.endpoints: tuple[str, ...] = tuple(endpoints)
        #: gRPC deadline (seconds) applied to each call.
        self.timeout: float = timeout
        self._channel: grpc.aio.Channel | None = None
        self._kv: rpc_pb2_grpc.KVStub | None = None
        self._lease: rpc_pb2_grpc.LeaseStub | None = None
        self._watch: rpc_pb2_grpc.WatchStub | None = None
        self._ka_call: grpc.aio.StreamStreamCall[Any, Any] | None = None
        self._ka_lock = asyncio.Lock()
        self._closed = False
        self._credentials, self._token = credentials, token

    @classmethod
    def from_settings(cls, settings: EtcdSettings, *, timeout: float = 5.0) -> EtcdClient:
        """A client of ``settings.endpoints`` with TLS and user as ``GNOMON_ETCD_*`` say. Raises
        ``ValueError``/``OSError`` as :func:`~gnomon.common.coordination.etcd_auth.etcd_credentials`,
        and ``ValueError`` for TLS with several endpoints and no ``GNOMON_ETCD_TLS_SERVER_NAME``
        (gRPC would check the certificates against the whole address list as one name and refuse
        every member)."""
        credentials, token = etcd_credentials(settings)
        if credentials is not None and len(settings.endpoint_list) > 1 and not settings.tls_server_name:
            raise ValueError(
                "TLS to several etcd endpoints needs GNOMON_ETCD_TLS_SERVER_NAME: a name every member's "
                "certificate carries (or give one DNS name that resolves to every member)"
            )
        return cls(
            settings.endpoint_list,
            timeout=timeout,
            credentials=credentials,
            token=token,
            server_name=settings.tls_server_name,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def _ensure_channel(self) -> None:
        if self._closed:
            raise RuntimeError("EtcdClient is closed")
        if self._channel is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self._target, options=self._options)
            else:
                self._channel = grpc.aio.secure_channel(
                    self._target, self._credentials, options=self._options
                )
            # the generated stubs are untyped (gnomon._proto is excluded from type checking)
            self._kv = rpc_pb2_grpc.KVStub(self._channel)  # type: ignore[no-untyped-call]
            self._lease = rpc_pb2_grpc.LeaseStub(self._channel)  # type: ignore[no-untyped-call]
            self._watch = rpc_pb2_grpc.WatchStub(self._channel)  # type: ignore[no-untyped-call]

    @property
    def _kv_stub(self) -> rpc_pb2_grpc.KVStub:
        self._ensure_channel()
        assert self._kv is not None
        return self._kv

    @property
    def _lease_stub(self) -> rpc_pb2_grpc.LeaseStub:
        self._ensure_channel()
        assert self._lease is not None
        return self._lease

    @property
    def _watch_stub(self) -> rpc_pb2_grpc.WatchStub:
        self._ensure_channel()
        assert self._watch is not None
        return self._watch

    async def _unary(self, what: str, method: Callable[..., Awaitable[Any]], request: Message) -> Any:
        """One unary RPC with the per-call deadline; every failure becomes :class:`EtcdError`. No retry."""
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            if self._token is not None and err.code() == grpc.StatusCode.UNAUTHENTICATED:
                self._token.invalidate()  # expired or revoked: the next call authenticates again
            raise EtcdError.from_rpc(what, err) from err
        except asyncio.CancelledError:
            if task_cancelled():
                raise
            raise closed_error(what) from None

    async def close(self) -> None:
        """Cancel the cached keepalive stream and close the channel (open watches end with EtcdError).

        Idempotent. The client cannot be used afterwards (calls raise ``RuntimeError``).
        """
        self._closed = True
        self._drop_keepalive_stream()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- leases ----------------------------------------------------------------------------------

    async def _lease_grant_ttl(self, ttl_s: int) -> tuple[int, int]:
        """Grant a lease; return ``(lease id, TTL seconds actually granted)``.

        etcd may grant more than asked (it enforces a minimum TTL derived from its election timeout).
        """
        if ttl_s <= 0:
            raise ValueError("ttl_s must be >= 1 second")
        resp = await self._unary(
            "LeaseGrant", self._lease_stub.LeaseGrant, rpc_pb2.LeaseGrantRequest(TTL=ttl_s)
        )
        if resp.error:
            raise EtcdError(f"etcd LeaseGrant failed: {resp.error}", details=resp.error)
        return resp.ID, resp.TTL

    async def lease_grant(self, ttl_s: int) -> int:
        """Grant a new lease of ``ttl_s`` seconds (>= 1) and return its id (non-zero int64).

        The lease expires ``ttl_s`` seconds (or etcd's minimum TTL, if larger) after the grant or the
        last keepalive, at the server's discretion (leader changes can extend it; never rely on that).

        Raises:
            ValueError: ``ttl_s`` < 1.
            EtcdError: transport failure or server error.
        """
        lease_id, _ = await self._lease_grant_ttl(ttl_s)
        return lease_id

    def _drop_keepalive_stream(self) -> None:
        call, self._ka_call = self._ka_call, None
        if call is not None:
            call.cancel()

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew ``lease_id`` once and return its TTL in seconds from now; 0 if the lease no longer exists.

        One request/response round trip on a ``LeaseKeepAlive`` bidi stream that is opened on first use
        and reused by later calls (calls are serialised on it). The round trip is bounded by
        ``timeout`` seconds.

        Raises:
            EtcdError: transport failure, deadline, or the stream ended. The cached stream is dropped so
                the next call opens a new one. Whether this renewal reached etcd is then unknown.

        If the awaiting task is cancelled mid-round-trip the stream is dropped as well (a late reply
        must not be taken for the next call's answer).
        """
        async with self._ka_lock:
            ok = False
            try:
                if self._ka_call is None:
                    self._ka_call = self._lease_stub.LeaseKeepAlive()
                call = self._ka_call
                async with asyncio.timeout(self.timeout):
                    await call.write(rpc_pb2.LeaseKeepAliveRequest(ID=lease_id))
                    got = await call.read()
                if got is grpc.aio.EOF:
                    raise EtcdError("etcd LeaseKeepAlive stream ended", code=grpc.StatusCode.UNAVAILABLE)
                resp = cast(rpc_pb2.LeaseKeepAliveResponse, got)  # the stream's only message type
                if resp.ID != lease_id:  # cannot happen on a serialised stream; do not trust it if it does
                    raise EtcdError(f"etcd LeaseKeepAlive answered for lease {resp.ID}, asked {lease_id}")
                ok = True
                return max(0, int(resp.TTL))
            except grpc.aio.AioRpcError as err:
                raise EtcdError.from_rpc("LeaseKeepAlive", err) from err
            except TimeoutError as err:
                raise EtcdError(
                    f"etcd LeaseKeepAlive got no reply within {self.timeout} s",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                ) from err
            except (asyncio.InvalidStateError, grpc.aio.UsageError) as err:
                raise EtcdError(
                    f"etcd LeaseKeepAlive stream unusable: {err}", code=grpc.StatusCode.UNAVAILABLE
                ) from err
            except asyncio.CancelledError:
                if task_cancelled():
                    raise
                raise closed_error("LeaseKeepAlive") from None
            finally:
                if not ok:
                    self._drop_keepalive_stream()

    async def lease_revoke(self, lease_id: int) -> None:
        """Revoke ``lease_id``: etcd deletes every key attached to it, at once.

        A lease etcd does not know (already expired or revoked; gRPC ``NOT_FOUND``) is not an error.

        Raises:
            EtcdError: any other failure (the revoke may or may not have happened).
        """
        try:
            await self._unary(
                "LeaseRevoke", self._lease_stub.LeaseRevoke, rpc_pb2.LeaseRevokeRequest(ID=lease_id)
            )
        except EtcdError as err:
            if err.code != grpc.StatusCode.NOT_FOUND:
                raise

    # -- KV --------------------------------------------------------------------------------------

    async def _txn(self, req: rpc_pb2.TxnRequest) -> rpc_pb2.TxnResponse:
        # Deliberately a single attempt: a Txn whose reply was lost may already be applied, and a retry
        # of a create-if-absent would then see its own key and report a false failure
        # (docs/adr/0002-etcd-client.md).
        resp: rpc_pb2.TxnResponse = await self._unary("Txn", self._kv_stub.Txn, req)
        return resp

    async def create_if_absent(self, key: bytes, value: bytes, lease_id: int = 0) -> tuple[bool, KeyValue]:
        """Create ``key`` = ``value`` (attached to ``lease_id``, 0 = no lease) only if it does not exist.

        One Txn: ``if create_revision(key) == 0 then [put, get] else [get]``.

        Returns:
            ``(acquired, kv)``: ``acquired`` is True if this call created the key; ``kv`` is the key as it
            is now (ours if acquired, the current holder's otherwise). When acquired,
            ``kv.create_revision`` is the fencing token: it equals the Txn's revision and is larger
            than any earlier owner's.

        Raises:
            EtcdError: transport failure, deadline, or server error such as ``NOT_FOUND`` for an unknown or
                expired ``lease_id``. NEVER retried here: after a transport error the outcome is unknown
                (call :meth:`get` and compare ``kv.lease`` / ``kv.value`` with yours).
        """
        get = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=key))
        req = rpc_pb2.TxnRequest(
            compare=[
                rpc_pb2.Compare(
                    result=rpc_pb2.Compare.EQUAL,
                    target=rpc_pb2.Compare.CREATE,
                    key=key,
                    create_revision=0,
                )
            ],
            success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease_id)),
                get,
            ],
            failure=[get],
        )
        resp = await self._txn(req)
        kvs = resp.responses[-1].response_range.kvs
        if not kvs:  # impossible inside one Txn; refuse to guess
            raise EtcdError(f"etcd Txn on {key!r} returned no key (succeeded={resp.succeeded})")
        return resp.succeeded, KeyValue.from_pb(kvs[0])

    async def delete_if_create_revision(self, key: bytes, create_revision: int) -> bool:
        """Delete ``key`` only if its ``create_revision`` still equals ``create_revision`` (i.e. it is ours).

        Returns:
            True if this call deleted the key; False if it is absent or belongs to a newer incarnation.

        Raises:
            EtcdError: transport failure or server error (outcome unknown; not retried).
        """
        req = rpc_pb2.TxnRequest(
            compare=[
                rpc_pb2.Compare(
                    result=rpc_pb2.Compare.EQUAL,
                    target=rpc_pb2.Compare.CREATE,
                    key=key,
                    create_revision=create_revision,
                )
            ],
            success=[rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key))],
        )
        resp = await self._txn(req)
        return resp.succeeded and resp.responses[0].response_delete_range.deleted > 0

    async def get(self, key: bytes) -> KeyValue | None:
        """Return ``key`` (linearizable read) or None if it does not exist.

        Raises:
            EtcdError: transport failure, deadline or server error.
        """
        resp = await self._unary("Range", self._kv_stub.Range, rpc_pb2.RangeRequest(key=key))
        return KeyValue.from_pb(resp.kvs[0]) if resp.kvs else None

    async def get_prefix(self, prefix: bytes, limit: int = 0) -> list[KeyValue]:
        """Return the keys starting with ``prefix``, sorted by key ascending (linearizable read).

        Args:
            prefix: key prefix; ``b""`` means every key.
            limit: at most this many keys (the smallest ones); 0 = no limit.

        Raises:
            EtcdError: transport failure, deadline or server error.
        """
        if limit < 0:
            raise ValueError("limit must be >= 0")
        req = rpc_pb2.RangeRequest(
            key=prefix or b"\x00",
            range_end=prefix_range_end(prefix),
            limit=limit,
            sort_order=rpc_pb2.RangeRequest.ASCEND,
            sort_target=rpc_pb2.RangeRequest.KEY,
        )
        resp = await self._unary("Range", self._kv_stub.Range, req)
        return [KeyValue.from_pb(kv) for kv in resp.kvs]

    async def put(self, key: bytes, value: bytes, lease_id: int = 0) -> int:
        """Unconditionally set ``key`` = ``value`` (attached to ``lease_id``, 0 = none); return the new revision.

        Raises:
            EtcdError: transport failure, deadline, or server error (``NOT_FOUND`` for an unknown lease).
                Not retried; the outcome is then unknown.
        """
        resp = await self._unary(
            "Put", self._kv_stub.Put, rpc_pb2.PutRequest(key=key, value=value, lease=lease_id)
        )
        return int(resp.header.revision)

    async def delete(self, key: bytes) -> int:
        """Delete ``key`` unconditionally; return how many keys were deleted (0 or 1).

        Raises:
            EtcdError: transport failure, deadline or server error (outcome unknown; not retried).
        """
        resp = await self._unary(
            "DeleteRange", self._kv_stub.DeleteRange, rpc_pb2.DeleteRangeRequest(key=key)
        )
        return int(resp.deleted)

    # -- watch -----------------------------------------------------------------------------------

    async def watch_prefix(
        self, prefix: bytes, start_revision: int = 0
    ) -> AsyncIterator[tuple[str, KeyValue]]:
        """Yield ``(event, kv)`` for every change under ``prefix``, in revision order.

        Args:
            prefix: key prefix to watch (``b""`` = every key).
            start_revision: first revision to report (replays history from there); 0 = changes after the
                watch is created. To resume, pass the last seen ``kv.mod_revision + 1``.

        Yields:
            ``("PUT", kv)`` for creates and updates; ``("DELETE", kv)`` for deletions and lease expiries
            (then ``kv.value`` is empty, ``kv.mod_revision`` is the deletion's revision and the other
            revisions are 0).

        Raises:
            EtcdCompactedError: ``start_revision`` is older than etcd's compaction point.
            EtcdError: the stream failed or ended, or etcd cancelled the watch. The watch does not
                reconnect by itself; re-watch from the last ``mod_revision + 1``.

        The stream has no deadline, so a member that stops answering without closing the connection
        (e.g. a paused process) stalls the iterator rather than raising; guard liveness with a
        :class:`LeaseKeeper`. Closing the generator (``aclose()``, ``break``) cancels the stream.
        """
        call = self._watch_stub.Watch()
        create = rpc_pb2.WatchCreateRequest(
            key=prefix or b"\x00", range_end=prefix_range_end(prefix), start_revision=start_revision
        )
        try:
            try:
                await call.write(rpc_pb2.WatchRequest(create_request=create))
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        raise EtcdError("etcd Watch stream ended", code=grpc.StatusCode.UNAVAILABLE)
                    if resp.compact_revision:
                        raise EtcdCompactedError(
                            f"etcd Watch: revision {start_revision} compacted; oldest is {resp.compact_revision}",
                            compact_revision=resp.compact_revision,
                        )
                    if resp.canceled:
                        reason = resp.cancel_reason or "no reason given"
                        raise EtcdError(f"etcd cancelled the watch: {reason}", details=reason)
                    for ev in resp.events:
                        kind = "DELETE" if ev.type == kv_pb2.Event.DELETE else "PUT"
                        yield kind, KeyValue.from_pb(ev.kv)
            except grpc.aio.AioRpcError as err:
                raise EtcdError.from_rpc("Watch", err) from err
            except (asyncio.InvalidStateError, grpc.aio.UsageError) as err:
                raise EtcdError(
                    f"etcd Watch stream unusable: {err}", code=grpc.StatusCode.UNAVAILABLE
                ) from err
            except asyncio.CancelledError:
                if task_cancelled():
                    raise
                raise closed_error("Watch") from None
        finally:
            call.cancel()
