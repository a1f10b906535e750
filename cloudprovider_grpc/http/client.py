"""The one HTTP client every cloud backend uses (on `requests`).

It owns what all clouds need and none should repeat: per-request (connect, read) timeouts, retries
with exponential backoff and full jitter that honour Retry-After, a client-side rate limit, Prometheus
metrics per backend/operation/status, and errors raised as `CloudError` with a precise message taken
from the cloud's JSON error body. Credentials live only inside the auth object, which never shows them:
not in reprs, log lines, error messages or metric labels.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import requests
import requests.auth
import urllib3.exceptions

from cloudprovider_grpc.core.clock import Clock, or_wall
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.ratelimit import TokenBucket
from cloudprovider_grpc.http.fence import check_fence
from cloudprovider_grpc.http.retry import (
    IDEMPOTENT_METHODS,
    RetryPolicy,
    parse_retry_after,
    status_is_retryable,
)
from cloudprovider_grpc.observability import tracing
from cloudprovider_grpc.observability.metrics import CLOUD_LATENCY, CLOUD_REQUESTS

log = logging.getLogger(__name__)

#: longest part of a non-JSON error body quoted in an error message
_MAX_QUOTED_BODY = 200


class SecretAuth(requests.auth.AuthBase):
    """Base for auth objects: holds a credential and can scrub it from any text."""

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(***)"

    __str__ = __repr__


class BearerAuth(SecretAuth):
    """`Authorization: Bearer <token>` (Cherry Servers, Vultr, ...)."""

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        r.headers["Authorization"] = f"Bearer {self._secret}"
        return r


@dataclass(frozen=True)
class Reply:
    """A successful response: status, headers (case-insensitive) and the raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    operation: str = ""
    backend: str = ""

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise CloudError(
                f"{self.backend} {self.operation}: response is not JSON (HTTP {self.status})", transient=True
            ) from exc


def error_message_from_body(body: bytes) -> str:
    """The cloud's own words from an error body.

    Understands the shapes the clouds use: `{"code": 400, "message": "..."}` (Cherry's live API, as
    cherrygo parses it), `{"error": "..."}` and `{"errors": [...]}` (what the in-tree Cherry provider
    parses), `{"detail": "..."}` (DRF-style APIs). Anything else is quoted, shortened."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return "(empty body)"
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        parts: list[str] = []
        for key in ("message", "error", "detail", "Message", "msg"):
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                parts.append(value.strip())
            elif isinstance(value, dict) and isinstance(value.get("message"), str):
                parts.append(value["message"].strip())
        errors = data.get("errors")
        if isinstance(errors, list):
            parts.extend(str(e).strip() for e in errors if str(e).strip())
        elif isinstance(errors, str) and errors.strip():
            parts.append(errors.strip())
        if parts:
            return "; ".join(dict.fromkeys(parts))
    one_line = " ".join(text.split())
    if len(one_line) > _MAX_QUOTED_BODY:
        one_line = one_line[:_MAX_QUOTED_BODY] + "..."
    return one_line


def _never_sent(exc: BaseException) -> bool:
    """True when the request certainly did not reach the server (no TCP connection was made)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return True
        if isinstance(cur, urllib3.exceptions.MaxRetryError) and cur.reason is not None:
            cur = cur.reason
            continue
        cur = (
            cur.__cause__
            or cur.__context__
            or (cur.args[0] if cur.args and isinstance(cur.args[0], BaseException) else None)
        )
    return False


def _describe_exception(exc: requests.RequestException, timeout: tuple[float, float]) -> str:
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"connection timed out after {timeout[0]:g}s"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return f"no response within {timeout[1]:g}s"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection refused" if _never_sent(exc) else "connection dropped before a response"
    return f"request failed ({type(exc).__name__})"


@dataclass
class _Attempt:
    status: int | None = None
    retry_after: float | None = None
    error: CloudError | None = None
    reply: Reply | None = None
    retryable: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)


class HttpClient:
    """A thread-safe JSON-over-HTTP client for one cloud API.

    `request()` returns a `Reply` for 2xx and raises `CloudError` otherwise: `transient` is True for
    connection errors, timeouts, 408, 429 and 5xx; `status` carries the HTTP status when there was one.
    """

    def __init__(
        self,
        backend: str,
        base_url: str,
        *,
        auth: SecretAuth | None = None,
        timeout: tuple[float, float] = (3.05, 10.0),
        retry: RetryPolicy | None = None,
        rate_limit_per_s: float | None = None,
        rate_burst: float = 1.0,
        max_elapsed: float | None = 60.0,
        user_agent: str = "cloudprovider-grpc",
        headers: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
    ) -> None:
        # every wait (back-off, rate limit) and every elapsed-time budget on one clock: a
        # simulation's virtual one makes them cost simulated seconds (cloudprovider_grpc/core/clock.py)
        self._clock = or_wall(clock)
        if sleep is None:
            sleep = self._clock.sleep
        self.backend = backend
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_elapsed = max_elapsed
        self._auth = auth
        self._sleep = sleep
        self._rng = rng or self._clock.rng()
        self._limiter = (
            TokenBucket(rate_limit_per_s, rate_burst, clock=self._clock.monotonic, sleep=sleep)
            if rate_limit_per_s
            else None
        )
        self._session = session or requests.Session()
        # Never read proxies/.netrc from the environment: a stray .netrc entry must not override the
        # configured credential, and emulator traffic on loopback must not go through a proxy.
        self._session.trust_env = False
        self._session.headers.update({"User-Agent": user_agent, "Accept": "application/json"})
        if headers:
            self._session.headers.update(headers)

    def __repr__(self) -> str:
        return f"HttpClient(backend={self.backend!r}, base_url={self.base_url!r}, auth={self._auth!r})"

    def close(self) -> None:
        self._session.close()

    def _redact(self, text: str) -> str:
        return self._auth.redact(text) if self._auth else text

    def url(self, path: str) -> str:
        return urljoin(self.base_url, path.lstrip("/"))

    def request(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        ok: Iterable[int] = (200, 201, 202, 204),
        urgent: bool = False,
    ) -> Reply:
        """One API call with retries. `urgent` calls (the listing a Refresh waits for) take
        rate-limit tokens before background ones. With traces on, one client span covers it."""
        method = method.upper()
        if tracing.TRACER is None:
            return self._request(method, path, operation, params, json_body, ok, urgent, [])
        host = self.base_url.split("://", 1)[-1].split("/", 1)[0]
        with tracing.cloud_call(self.backend, operation, method, path, host) as span:
            tried: list[_Attempt] = []
            status, error = None, ""
            try:
                reply = self._request(method, path, operation, params, json_body, ok, urgent, tried)
                status = reply.status
                return reply
            except CloudError as exc:
                status, error = exc.status, exc.code
                raise
            finally:
                throttled = sum(1 for a in tried if a.status == 429)
                resends = max(len(tried) - 1, 0)
                tracing.end_cloud_call(span, status=status, resends=resends, throttled=throttled, error=error)

    def _request(
        self,
        method: str,
        path: str,
        operation: str,
        params: Mapping[str, Any] | None,
        json_body: Any,
        ok: Iterable[int],
        urgent: bool,
        tried: list[_Attempt],
    ) -> Reply:
        """`request` without the span: every attempt is appended to `tried`."""
        ok_statuses = frozenset(ok)
        started = self._clock.monotonic()
        attempts = self.retry.retries + 1
        last: _Attempt | None = None
        for attempt in range(attempts):
            last = self._attempt(method, path, operation, params, json_body, ok_statuses, urgent)
            tried.append(last)
            if last.reply is not None:
                return last.reply
            assert last.error is not None
            if not last.retryable or attempt == attempts - 1:
                break
            delay = self.retry.backoff(attempt, self._rng)
            if last.retry_after is not None:
                delay = min(last.retry_after, self.retry.max_retry_after)
            if self.max_elapsed is not None and self._clock.monotonic() - started + delay > self.max_elapsed:
                break
            log.info(
                "%s %s: %s; retrying in %.2fs (attempt %d of %d)",
                self.backend, operation, last.error.message, delay, attempt + 2, attempts,
            )  # fmt: skip
            self._sleep(delay)
        assert last is not None and last.error is not None
        raise last.error

    def _attempt(
        self,
        method: str,
        path: str,
        operation: str,
        params: Mapping[str, Any] | None,
        json_body: Any,
        ok: frozenset[int],
        urgent: bool,
    ) -> _Attempt:
        if self._limiter is not None:
            self._limiter.acquire(urgent)
        where = f"{self.backend} {operation} ({method} /{path.lstrip('/')})"
        check_fence(where)  # last check before the request leaves: a term may have ended meanwhile
        t0 = time.monotonic()
        try:
            resp = self._session.request(
                method,
                self.url(path),
                params=params,
                json=json_body,
                auth=self._auth,
                timeout=self.timeout,
                allow_redirects=False,
            )
            body = resp.content
        except requests.RequestException as exc:
            elapsed = time.monotonic() - t0
            CLOUD_REQUESTS.labels(self.backend, operation, "error").inc()
            CLOUD_LATENCY.labels(self.backend, operation).observe(elapsed)
            never_sent = _never_sent(exc)
            transport = isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)
            message = self._redact(f"{where}: {_describe_exception(exc, self.timeout)}")
            log.debug("%s after %.3fs", message, elapsed)
            return _Attempt(
                error=CloudError(
                    message, transient=transport, code="UNREACHABLE" if transport else "CLOUD_ERROR"
                ),
                retryable=transport and (never_sent or method in IDEMPOTENT_METHODS),
            )
        elapsed = time.monotonic() - t0
        CLOUD_REQUESTS.labels(self.backend, operation, str(resp.status_code)).inc()
        CLOUD_LATENCY.labels(self.backend, operation).observe(elapsed)
        log.debug("%s -> %d in %.3fs", where, resp.status_code, elapsed)
        if resp.status_code in ok:
            return _Attempt(
                status=resp.status_code,
                reply=Reply(resp.status_code, resp.headers, body, operation=operation, backend=self.backend),
            )
        status = resp.status_code
        detail = error_message_from_body(body)
        transient = status in (408, 429) or status >= 500
        message = self._redact(f"{where}: HTTP {status}: {detail}")
        return _Attempt(
            status=status,
            retry_after=parse_retry_after(resp.headers.get("Retry-After")) if status in (429, 503) else None,
            error=CloudError(message, transient=transient, status=status, code=f"HTTP_{status}"),
            retryable=status_is_retryable(method, status),
        )
