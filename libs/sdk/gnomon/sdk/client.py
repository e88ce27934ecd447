"""The clients of the Gnomon API: :class:`AsyncClient`, the one implementation (on ``grpc.aio``), and
:class:`Client`, its synchronous face.

``AsyncClient`` is assembled from one part per resource: jobs (:mod:`.jobs`), schedules
(:mod:`.schedules`), dead letters (:mod:`.dead_letters`), queues (:mod:`.queues`) and the cluster
(:mod:`.cluster`). ``Client`` runs an ``AsyncClient`` on a private event loop in a background thread
(a :class:`~gnomon.sdk.portal.Portal`, the way APScheduler 4's sync scheduler wraps its async one):
each of its methods is generated from the async one by :func:`_blocking` / :func:`_iterating`, so
both faces have the same arguments, docstrings, results and exceptions.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from .access import AccessClient
from .base import DEFAULT_API
from .cluster import ClusterClient
from .dead_letters import DeadLettersClient
from .jobs import JobsClient
from .portal import Portal
from .queues import QueuesClient
from .schedules import SchedulesClient

__all__ = ["Client", "AsyncClient", "DEFAULT_API"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class AsyncClient(JobsClient, SchedulesClient, DeadLettersClient, QueuesClient, ClusterClient, AccessClient):
    """Asynchronous client of the Gnomon API (``JobService``, ``ScheduleService``,
    ``DeadLetterService``, ``QueueService``, ``ClusterService``, ``NamespaceService``,
    ``AccessService``).

    Args:
        api: ``host:port`` of the API server; None: ``GNOMON_API``, else the profile's ``address``,
            else ``127.0.0.1:7070`` (:mod:`gnomon.sdk.connection`).
        namespace: tenant namespace id or ``"namespaces/<id>"``; None: ``GNOMON_NAMESPACE``, else the
            profile's, else ``"default"``.
        timeout: per-call deadline in seconds (``None``: no deadline).
        credentials: ``grpc.ChannelCredentials`` to use as they are; ``None`` -> TLS and API key as
            :func:`gnomon.sdk.connection.resolve` finds them (plaintext only when ``insecure``).
        metadata: extra call metadata sent with every RPC.
        channel_options: extra ``grpc`` channel options.
        api_key: the API key (``gnk_...``) sent as ``authorization: Bearer``; None: ``GNOMON_API_KEY``,
            ``GNOMON_API_KEY_FILE``, else the profile's ``api_key``/``api_key_file``.
        insecure: True: plaintext, no key sent; None: ``GNOMON_INSECURE``, else the profile's.
        profile: the config-file profile to read; None: ``GNOMON_PROFILE``, else the file's ``current``.

    Raises ``ValueError`` for an unusable profile or config file, ``OSError`` for an unreadable CA,
    certificate or key file.

    Every method is a coroutine, except the ``list_*`` iterators (``list_jobs``, ``list_schedules``,
    ``list_schedule_occurrences``, ``list_dead_letters``, ``list_audit_entries``), which return async
    iterators fetching pages lazily. Every RPC failure raises :class:`~gnomon.sdk.GnomonError`;
    arguments that cannot be encoded raise ``TypeError``/``ValueError`` before anything is sent.
    Results are the frozen models of :mod:`gnomon.sdk.models`. Use ``async with AsyncClient(...) as
    c:`` (closes the channel on exit); create it inside a running event loop.
    """

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Awaitable[R]],
) -> Callable[Concatenate[Client, P], R]:
    """The sync face of a coroutine method of :class:`AsyncClient`: runs it on the client's portal
    and returns its result (same signature, same docstring)."""

    async def run(client: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(client, *args, **kwargs)

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._portal.call(run(self._async, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


def _iterating(
    method: Callable[Concatenate[AsyncClient, P], AsyncIterator[T]],
) -> Callable[Concatenate[Client, P], Iterator[T]]:
    """The sync face of an async-iterator method of :class:`AsyncClient`: a lazy plain iterator
    (one page fetched through the portal when the previous one is used up)."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._portal.iterate(method(self._async, *args, **kwargs))

    functools.update_wrapper(call, method)
    return call


async def _open(**kwargs: Any) -> AsyncClient:
    return AsyncClient(**kwargs)


class Client:
    """Synchronous client of the Gnomon API: the methods of :class:`AsyncClient`, blocking.

    Arguments as :class:`AsyncClient`. Every method takes the same arguments, returns the same models
    and raises the same exceptions (:class:`~gnomon.sdk.GnomonError` for a failed RPC, ``TypeError``/
    ``ValueError`` for arguments that cannot be encoded) as its async twin; the ``list_*`` iterators
    are plain iterators fetching pages lazily. Usable as a context manager (``with Client(...) as
    c:``); :meth:`close` (or the end of the ``with``) closes the channel and stops the client's
    background event-loop thread. Safe to share between threads. In ``async`` code use
    :class:`AsyncClient` instead (a blocking call would stall the caller's event loop).

    Raises:
        RuntimeError: a method called after :meth:`close`.
    """

    def __init__(
        self,
        api: str | None = None,
        namespace: str | None = None,
        *,
        timeout: float | None = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
        channel_options: list[tuple[str, object]] | None = None,
        api_key: str | None = None,
        insecure: bool | None = None,
        profile: str | None = None,
    ) -> None:
        self._portal = Portal(name=f"gnomon-client-{api or 'profile'}")
        try:
            self._async = self._portal.call(
                _open(
                    api=api,
                    namespace=namespace,
                    timeout=timeout,
                    credentials=credentials,
                    metadata=metadata,
                    channel_options=channel_options,
                    api_key=api_key,
                    insecure=insecure,
                    profile=profile,
                )
            )
        except BaseException:
            self._portal.stop()
            raise
        # A client dropped without close() still closes its channel and thread (at the latest at exit).
        self._finalizer = weakref.finalize(self, self._portal.stop, self._async.close)

    @property
    def api(self) -> str:
        """``host:port`` of the API server."""
        return self._async.api

    @property
    def namespace(self) -> str:
        """The namespace id (without ``namespaces/``)."""
        return self._async.namespace

    @property
    def timeout(self) -> float | None:
        """Per-call deadline in seconds, or ``None``."""
        return self._async.timeout

    def close(self) -> None:
        """Closes the channel and stops the background thread. Idempotent."""
        self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- jobs
    create_job = _blocking(AsyncClient.create_job)
    get_job = _blocking(AsyncClient.get_job)
    list_jobs_page = _blocking(AsyncClient.list_jobs_page)
    list_jobs = _iterating(AsyncClient.list_jobs)
    cancel_job = _blocking(AsyncClient.cancel_job)
    reschedule_job = _blocking(AsyncClient.reschedule_job)
    list_job_attempts = _blocking(AsyncClient.list_job_attempts)
    # -- schedules
    create_schedule = _blocking(AsyncClient.create_schedule)
    get_schedule = _blocking(AsyncClient.get_schedule)
    list_schedules_page = _blocking(AsyncClient.list_schedules_page)
    list_schedules = _iterating(AsyncClient.list_schedules)
    update_schedule = _blocking(AsyncClient.update_schedule)
    delete_schedule = _blocking(AsyncClient.delete_schedule)
    pause_schedule = _blocking(AsyncClient.pause_schedule)
    resume_schedule = _blocking(AsyncClient.resume_schedule)
    trigger_schedule = _blocking(AsyncClient.trigger_schedule)
    backfill_schedule = _blocking(AsyncClient.backfill_schedule)
    preview_schedule = _blocking(AsyncClient.preview_schedule)
    simulate_outage = _blocking(AsyncClient.simulate_outage)
    list_schedule_occurrences_page = _blocking(AsyncClient.list_schedule_occurrences_page)
    list_schedule_occurrences = _iterating(AsyncClient.list_schedule_occurrences)
    # -- dead letters and the audit log
    list_dead_letters_page = _blocking(AsyncClient.list_dead_letters_page)
    list_dead_letters = _iterating(AsyncClient.list_dead_letters)
    replay_dead_letters = _blocking(AsyncClient.replay_dead_letters)
    list_audit_entries_page = _blocking(AsyncClient.list_audit_entries_page)
    list_audit_entries = _iterating(AsyncClient.list_audit_entries)
    # -- queues
    get_queue = _blocking(AsyncClient.get_queue)
    set_queue_rate_limit = _blocking(AsyncClient.set_queue_rate_limit)
    # -- cluster
    list_dispatchers = _blocking(AsyncClient.list_dispatchers)
    list_shards = _blocking(AsyncClient.list_shards)
    # -- namespaces and access
    create_namespace = _blocking(AsyncClient.create_namespace)
    get_namespace = _blocking(AsyncClient.get_namespace)
    list_namespaces_page = _blocking(AsyncClient.list_namespaces_page)
    list_namespaces = _iterating(AsyncClient.list_namespaces)
    update_namespace = _blocking(AsyncClient.update_namespace)
    delete_namespace = _blocking(AsyncClient.delete_namespace)
    create_principal = _blocking(AsyncClient.create_principal)
    get_principal = _blocking(AsyncClient.get_principal)
    list_principals_page = _blocking(AsyncClient.list_principals_page)
    list_principals = _iterating(AsyncClient.list_principals)
    disable_principal = _blocking(AsyncClient.disable_principal)
    create_api_key = _blocking(AsyncClient.create_api_key)
    list_api_keys_page = _blocking(AsyncClient.list_api_keys_page)
    list_api_keys = _iterating(AsyncClient.list_api_keys)
    revoke_api_key = _blocking(AsyncClient.revoke_api_key)
    grant_role = _blocking(AsyncClient.grant_role)
    revoke_role = _blocking(AsyncClient.revoke_role)
    list_grants_page = _blocking(AsyncClient.list_grants_page)
    list_grants = _iterating(AsyncClient.list_grants)
    whoami = _blocking(AsyncClient.whoami)
