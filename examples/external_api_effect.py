"""Idempotency at the effect boundary, case 2: the effect is a call to an external API that accepts
an idempotency key (Stripe, Adyen, PayPal, many cloud APIs).

Gnomon runs a job at least once; an attempt whose outcome is unknown (worker crash, lease lost,
result lost after the charge went through) is retried if the job is ``idempotent``. The scheduler
cannot tell whether the provider already charged; the provider can, if every attempt sends the
**same** key: :attr:`gnomon.sdk.JobContext.idempotency_key` is stable across attempts (the job id
by default; pass a business key such as ``"order-42-charge"`` when creating the job, so that even
two *jobs* for one order charge once). The provider stores the first response under the key and
replays it for any repeat, so the retry gets the original payment back instead of a second one.

This module has both sides:

* :class:`PaymentsServer` -- a tiny "payments provider" (``http.server`` in a thread) that
  deduplicates ``POST /payments`` on the ``Idempotency-Key`` header the way real providers do:
  first request -> 201 and the payment; same key and same body -> the stored response again
  (``Idempotent-Replayed: true``); same key, different body -> 422; same key while the first
  request is still being processed -> 409. ``GET /payments`` lists what was really charged.
* :func:`handle` -- the job handler: charges ``{"account": ..., "amount_cents": ...}`` at
  ``$PAYMENTS_URL`` with ``Idempotency-Key: ctx.idempotency_key``.

Run it (with ``gnomon dev`` serving the API)::

    python -m examples.external_api_effect --port 8099 &
    PAYMENTS_URL=http://127.0.0.1:8099 PYTHONPATH=. gnomon worker --queue charges --handler examples.external_api_effect:handle
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import threading
import urllib.error
import urllib.request
import uuid

from gnomon.sdk import JobContext, PermanentError, ThrottledError

# -- the provider --------------------------------------------------------------------------------


def _payment(raw: str, key: str) -> tuple[int, dict]:
    """The provider's answer to a new ``POST /payments`` body ``raw`` under idempotency ``key``:
    ``(201, the payment)``, or ``(400, an error)`` for a malformed or non-positive amount."""
    try:
        req = json.loads(raw)
        account, amount = str(req["account"]), int(req["amount_cents"])
        if amount <= 0:
            raise ValueError("amount_cents must be positive")
    except (ValueError, KeyError, TypeError) as e:
        return 400, {"error": f"bad request: {e}"}
    payment = {"id": f"pay_{uuid.uuid4().hex[:12]}", "account": account, "amount_cents": amount}
    return 201, {**payment, "idempotency_key": key}


class PaymentsServer:
    """An in-memory payments API on ``host:port`` (0 = a free port), served by a daemon thread.

    ``payments`` lists every payment really made; ``requests`` counts every ``POST /payments``
    received (replays included). Thread-safe.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.lock = threading.Lock()
        self.payments: list[dict] = []
        self.requests = 0
        self._by_key: dict[
            str, tuple[str, int, dict] | None
        ] = {}  # key -> (body, status, response) | in progress
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: dict, replayed: bool = False) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if replayed:
                    self.send_header("Idempotent-Replayed", "true")
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                if self.path.rstrip("/") != "/payments":
                    return self._send(404, {"error": "not found"})
                with outer.lock:
                    return self._send(200, {"payments": list(outer.payments)})

            def do_POST(self):
                if self.path.rstrip("/") != "/payments":
                    return self._send(404, {"error": "not found"})
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                key = self.headers.get("Idempotency-Key", "")
                with outer.lock:
                    outer.requests += 1
                    if not key:
                        return self._send(400, {"error": "Idempotency-Key header required"})
                    if key in outer._by_key:
                        seen = outer._by_key[key]
                        if seen is None:
                            return self._send(409, {"error": "a request with this key is in progress"})
                        body, status, response = seen
                        if body != raw:
                            return self._send(422, {"error": "key reused with different parameters"})
                        return self._send(status, response, replayed=True)
                    outer._by_key[key] = None  # in progress
                status, response = _payment(raw, key)
                with outer.lock:
                    if status == 201:
                        outer.payments.append(response)
                    outer._by_key[key] = (raw, status, response)  # replayed for every repeat
                return self._send(status, response)

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port``."""
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address is text (typeshed also allows bytes)
        return f"http://{host}:{port}"

    def start(self) -> PaymentsServer:
        """Serves in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="payments", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> PaymentsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- the job handler -----------------------------------------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never route loopback via a proxy


def charge(url: str, account: str, amount_cents: int, idempotency_key: str, timeout_s: float = 10.0) -> dict:
    """``POST {url}/payments`` with the idempotency key; returns the payment (new or replayed).

    Raises:
        PermanentError: the provider refused the request (4xx other than 409/429): retrying the same
            request cannot succeed.
        ThrottledError: 429 (honours ``Retry-After``) or 409 (the same key is being processed
            right now: look again shortly).
        urllib.error.URLError, TimeoutError, HTTPError 5xx: transient (the worker reports them as
            TRANSIENT). Retrying is safe *because* of the key: if the charge went through and only
            the response was lost, the retry gets the stored payment back.
    """
    body = json.dumps({"account": account, "amount_cents": amount_cents}, sort_keys=True).encode()
    req = urllib.request.Request(
        f"{url.rstrip('/')}/payments",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
    )
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:200]
        if e.code == 429:
            raise ThrottledError(float(e.headers.get("Retry-After") or 1), f"throttled: {detail}") from None
        if e.code == 409:
            raise ThrottledError(1.0, f"in progress: {detail}") from None
        if 400 <= e.code < 500:
            raise PermanentError(f"payment refused ({e.code}): {detail}") from None
        raise


def payments_url() -> str:
    """The provider's base URL: ``$PAYMENTS_URL`` (default ``http://127.0.0.1:8099``)."""
    return os.environ.get("PAYMENTS_URL", "http://127.0.0.1:8099")


def handle(ctx: JobContext) -> dict:
    """Charges the account once per idempotency key, however many attempts run; returns the payment."""
    try:
        order = ctx.json()
        account, amount = str(order["account"]), int(order["amount_cents"])
    except (ValueError, KeyError, TypeError) as e:
        raise PermanentError(f"bad payload: {e!r}") from None
    # The key comes from the job, never from the attempt (ctx.attempt, ctx.fencing_token change on retry).
    return charge(payments_url(), account, amount, ctx.idempotency_key)


def main() -> None:
    """``python -m examples.external_api_effect [--port N]``: serves the payments provider."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8099)
    args = ap.parse_args()
    server = PaymentsServer(args.host, args.port)
    print(
        f"payments provider on {server.url} (POST /payments with Idempotency-Key; GET /payments)", flush=True
    )
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
