"""The one page-token codec of every List RPC (AIP-158), and the page-size and page-split helpers.

A token is opaque to clients: ``base64url(payload) "." base64url(mac)`` without padding, where the
payload is the JSON object ``{"m": method, "f": filters, "c": cursor}`` and the MAC is the first 16
bytes of HMAC-SHA256 over it. ``method`` names the List RPC (``"ListJobs"``), ``filters`` is a
fingerprint of the request's filter fields (:func:`fingerprint`), ``cursor`` is the keyset position
after the last row returned (string and integer values only).

:func:`decode` refuses with ``INVALID_ARGUMENT`` (one violation on ``page_token``) any token it did
not make for the same method and filters: garbage, a token edited by hand (the MAC no longer
matches), a token of another List RPC or of the same RPC with other filters. The MAC key is a fixed
constant, so the MAC is an integrity check, not a secret: a cursor only positions a keyset read inside
the caller's own (namespace-scoped, filtered) query, so a forged one could show nothing the caller
cannot list anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from google.protobuf.message import Message

from gnomon.common.errors import FieldViolation, InvalidArgument, Validator

#: A keyset position: JSON-able scalar values by short key.
Cursor = Mapping[str, str | int]

FIELD = "page_token"
_KEY = b"gnomon.v1.page_token"
_MAC_BYTES = 16
#: Longest token accepted (characters); longer input is refused before decoding.
MAX_TOKEN_CHARS = 2048
#: Page size (rows) of a List RPC whose request leaves ``page_size`` 0.
DEFAULT_PAGE_SIZE = 100
#: Largest ``page_size`` (rows) a List RPC accepts; larger is INVALID_ARGUMENT.
MAX_PAGE_SIZE = 1000
#: ListJobAttempts' page (rows): a job has at most 100 attempts, so 0 and anything larger mean 100.
ATTEMPTS_PAGE_SIZE = 100

T = TypeVar("T")
M = TypeVar("M", bound=Message)

#: Bytes of a List reply kept outside the items' budget: the next_page_token and the field framing.
REPLY_RESERVE_BYTES = 4096
#: Framing bytes counted per item on top of its serialized size (field tag and length prefix).
_ITEM_FRAMING_BYTES = 6


def fingerprint(*parts: object) -> str:
    """A short (16 hex digits) fingerprint of a request's filter values, e.g.
    ``fingerprint(namespace, state, queue)``; ``None`` and ``""`` differ."""
    return hashlib.sha256("|".join(repr(p) for p in parts).encode()).hexdigest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(payload: bytes) -> bytes:
    return hmac.new(_KEY, payload, hashlib.sha256).digest()[:_MAC_BYTES]


def _refused(description: str) -> InvalidArgument:
    return InvalidArgument([FieldViolation(FIELD, description)])


def encode(method: str, filters: str, cursor: Cursor) -> str:
    """The page token of ``method`` for a request with filter fingerprint ``filters`` whose next page
    starts after ``cursor``."""
    payload = json.dumps(
        {"m": method, "f": filters, "c": dict(cursor)}, separators=(",", ":"), sort_keys=True
    )
    raw = payload.encode()
    return f"{_b64(raw)}.{_b64(_mac(raw))}"


def decode(token: str, method: str, filters: str) -> dict[str, str | int]:
    """The cursor of a token made by :func:`encode` for the same ``method`` and ``filters``.
    Raises :class:`InvalidArgument` on ``page_token`` for any other token (see the module docstring)."""
    not_ours = _refused(f"is not a token returned by {method}")
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise not_ours
    body, mac = token.split(".")
    try:
        raw, got = _unb64(body), _unb64(mac)
    except (binascii.Error, ValueError):
        raise not_ours from None
    if not hmac.compare_digest(got, _mac(raw)):
        raise not_ours
    try:
        data = json.loads(raw)
    except ValueError:
        raise not_ours from None
    if not isinstance(data, dict) or data.get("m") != method:
        raise not_ours
    if data.get("f") != filters:
        raise _refused("belongs to a request with other filters")
    cursor = data.get("c")
    if not isinstance(cursor, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool) for k, v in cursor.items()
    ):
        raise not_ours
    return cursor


def decode_into(v: Validator, token: str, method: str, filters: str) -> dict[str, str | int] | None:
    """Like :func:`decode`, but records the violation in ``v`` (None then) so a request's violations
    are reported together; an empty token is None without a violation."""
    if not token:
        return None
    try:
        return decode(token, method, filters)
    except InvalidArgument as e:
        v.violations += e.violations
        return None


# ---- typed cursors --------------------------------------------------------------------------------


def keyset(at: datetime, row_id: uuid.UUID) -> Cursor:
    """The cursor ``(at, row_id)``: an aware instant and a row id (the keyset of lists ordered by a
    time column then id); read back with :func:`keyset_of`."""
    return {"t": at.isoformat(), "id": str(row_id)}


def encode_keyset(method: str, filters: str, at: datetime, row_id: uuid.UUID) -> str:
    """A token whose cursor is ``(at, row_id)`` (:func:`keyset`)."""
    return encode(method, filters, keyset(at, row_id))


def keyset_of(cursor: Mapping[str, str | int], method: str) -> tuple[datetime, uuid.UUID]:
    """``(at, row_id)`` of a cursor made by :func:`encode_keyset`; :class:`InvalidArgument` otherwise."""
    at, row_id = cursor.get("t"), cursor.get("id")
    try:
        if isinstance(at, str) and isinstance(row_id, str):
            t = datetime.fromisoformat(at)
            if t.tzinfo is not None:
                return t, uuid.UUID(row_id)
    except ValueError:
        pass
    raise _refused(f"is not a token returned by {method}")


def decode_keyset(token: str, method: str, filters: str) -> tuple[datetime, uuid.UUID]:
    """``(at, row_id)`` of a token made by :func:`encode_keyset`; raises :class:`InvalidArgument`
    on ``page_token`` for any other token."""
    return keyset_of(decode(token, method, filters), method)


def instant_of(cursor: Mapping[str, str | int], key: str, method: str) -> datetime:
    """The aware instant stored under ``key``; :class:`InvalidArgument` on ``page_token`` otherwise."""
    value = cursor.get(key)
    try:
        if isinstance(value, str):
            t = datetime.fromisoformat(value)
            if t.tzinfo is not None:
                return t
    except ValueError:
        pass
    raise _refused(f"is not a token returned by {method}")


def text_of(cursor: Mapping[str, str | int], key: str, method: str, max_len: int = 64) -> str:
    """The printable string (at most ``max_len`` characters) stored under ``key``;
    :class:`InvalidArgument` on ``page_token`` otherwise."""
    value = cursor.get(key)
    if isinstance(value, str) and value.isprintable() and len(value) <= max_len:
        return value
    raise _refused(f"is not a token returned by {method}")


def int_of(cursor: Mapping[str, str | int], key: str, method: str) -> int:
    """The non-negative integer stored under ``key``; :class:`InvalidArgument` on ``page_token``
    otherwise."""
    value = cursor.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _refused(f"is not a token returned by {method}")


# ---- page size and split --------------------------------------------------------------------------


def page_size(
    v: Validator, size: int, *, maximum: int = MAX_PAGE_SIZE, default: int = DEFAULT_PAGE_SIZE
) -> int:
    """``size`` (rows) if in ``0..maximum`` (0 means ``default``), else a violation on ``page_size``
    ("must be between 0 and {maximum}") is recorded in ``v`` and ``default`` returned."""
    if not v.check(0 <= size <= maximum, "page_size", f"must be between 0 and {maximum}"):
        return default
    return size or default


def checked_page_size(size: int, *, maximum: int = MAX_PAGE_SIZE, default: int = DEFAULT_PAGE_SIZE) -> int:
    """Like :func:`page_size`, but raises :class:`InvalidArgument` (one violation on ``page_size``)
    at once for a size outside ``0..maximum``."""
    v = Validator()
    size = page_size(v, size, maximum=maximum, default=default)
    v.raise_if_any()
    return size


def clamped_page_size(size: int, *, maximum: int) -> int:
    """``size`` (rows) capped at ``maximum`` (0 means ``maximum``); raises :class:`InvalidArgument`
    on ``page_size`` ("must not be negative") for a negative size."""
    if size < 0:
        raise InvalidArgument([FieldViolation("page_size", "must not be negative")])
    return min(size or maximum, maximum)


#: Bytes a listed row is assumed to take besides its payload when a listing decides at the source
#: which payloads to read (:func:`rows_within_budget`); :func:`budgeted_page` then cuts exactly.
ROW_ALLOWANCE_BYTES = 512


def rows_within_budget(payload_bytes: Sequence[int], size: int, budget_bytes: int) -> int:
    """How many of the first ``size`` rows of a listing, whose payloads are ``payload_bytes`` long
    (in row order, read without the payloads: ``octet_length``), fit in a reply of ``budget_bytes``
    (less :data:`REPLY_RESERVE_BYTES`), each counted as its payload plus :data:`ROW_ALLOWANCE_BYTES`.
    At least 1 when there is a row (one row larger than the budget goes out alone), 0 for none.
    The listing then reads the payloads of those rows only, so a List call holds at most about
    ``budget_bytes`` of payloads whatever its page size (docs/api.md, "Pagination")."""
    limit = max(0, budget_bytes - REPLY_RESERVE_BYTES)
    used = 0
    n = 0
    for b in payload_bytes[:size]:
        cost = (b or 0) + ROW_ALLOWANCE_BYTES
        if n and used + cost > limit:
            break
        used += cost
        n += 1
    return n


def split_page(rows: Sequence[T], size: int) -> tuple[list[T], T | None]:
    """``rows`` read with ``limit = size + 1`` -> ``(the page, its last row if more rows follow)``;
    the cursor of the next page is made from that last row (None: this is the last page)."""
    page = list(rows[:size])
    return page, (page[-1] if len(rows) > size and page else None)


def next_page(
    rows: Sequence[T], size: int, method: str, filters: str, cursor_of: Callable[[T], Cursor]
) -> tuple[list[T], str]:
    """``rows`` read with ``limit = size + 1`` -> ``(the page, the next page's token)``: the token of
    ``method`` and ``filters`` whose cursor is ``cursor_of(last row of the page)``, or ``""`` when
    this is the last page."""
    page, last = split_page(rows, size)
    return page, (encode(method, filters, cursor_of(last)) if last is not None else "")


def budgeted_page(
    rows: Sequence[T],
    size: int,
    method: str,
    filters: str,
    cursor_of: Callable[[T], Cursor],
    convert: Callable[[T], M],
    *,
    budget_bytes: int,
) -> tuple[list[M], str]:
    """Like :func:`next_page`, but converts each row of the page with ``convert`` (row -> protobuf
    message) and stops early once the items' serialized size (plus framing) would pass
    ``budget_bytes - REPLY_RESERVE_BYTES``: the token then continues after the last item returned, so
    paging still yields every row exactly once. At least one item is always returned (one item
    larger than the budget goes out alone). Returns ``(messages, next page token or "")``."""
    page, last = split_page(rows, size)
    limit = max(0, budget_bytes - REPLY_RESERVE_BYTES)
    out: list[M] = []
    used = 0
    for i, row in enumerate(page):
        msg = convert(row)
        n = msg.ByteSize() + _ITEM_FRAMING_BYTES
        if out and used + n > limit:
            return out, encode(method, filters, cursor_of(page[i - 1]))
        out.append(msg)
        used += n
    return out, (encode(method, filters, cursor_of(last)) if last is not None else "")
