"""A small threaded HTTP server that cloud API emulators are built on.

It gives every emulator the same machinery: routing by method and path pattern, an authentication
hook, an injectable clock (emulated provisioning delays can run on virtual time), a per-client rate
limit answered with 429 + Retry-After, seeded fault injection (`FaultPlan`), a request log tests and
benchmarks read, inspectable state guarded by one lock, and optional persistence to a JSON state
file so a standalone emulator survives restarts. Subclasses add routes, an error-body shape and their
state (`snapshot()`/`restore()`).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.ratelimit import TokenBucket
from cloudprovider_grpc.emulators.faults import FaultPlan

log = logging.getLogger(__name__)

_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: request log entries kept (the newest); far more than any test or benchmark reads between two marks
REQUEST_LOG_SIZE = 10_000


class HttpProblem(Exception):
    """Raised by handlers to answer with an error; the emulator renders `message` in its cloud's shape."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers: dict[str, str | None] = dict(headers or {})


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    body: bytes
    client: str
    params: dict[str, str] = field(default_factory=dict)
    principal: Any = None
    raw_query: str = ""  # as sent, for emulators that verify signatures over it

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise HttpProblem(400, f"request body is not valid JSON: {exc}") from exc


@dataclass
class Response:
    status: int = 200
    body: Any = None
    #: a None value drops a default header (e.g. {"Content-Type": None} for a bare 204)
    headers: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One request as the emulator saw it; `status` is None when the connection was dropped.

    Compact, because an emulator inside `serve --emulate` keeps REQUEST_LOG_SIZE of them: the query
    stays the string as sent and is parsed when read (parsed, it held ~750 bytes per AliCloud request:
    most of what a fuzzed AliCloud `serve --emulate` gained, benchmarks/memory_growth.py)."""

    time: float
    method: str
    path: str
    raw_query: str
    status: int | None
    fault: str | None
    processed: bool

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(self.raw_query)


Handler = Callable[[Request], Response]


class EmulatorServer:
    """Base class: subclasses register routes in `__init__` and may override the hooks below."""

    #: short name for logs
    name = "emulator"
    #: path prefix of the API ("/v1/"); `base_url` ends with it
    prefix = "/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Clock | Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        # None is wall time: subclasses pass their own optional clock straight through. A backend's
        # whole Clock (cloudprovider_grpc/core/clock.py; a simulation's) runs everything here, the
        # per-client rate limit too; a bare callable (a test's hand-turned clock) runs the state
        # timers only, and the rate limit stays on real time, as the clients it throttles do.
        if isinstance(clock, Clock):
            self.clock: Callable[[], float] = clock.now
            self._bucket_clock: Callable[[], float] = clock.monotonic
        else:
            self.clock = clock or time.time
            self._bucket_clock = time.monotonic
        self.faults = faults or FaultPlan.none()
        self.rate_limit_per_s = rate_limit_per_s
        self.state_file = Path(state_file) if state_file else None
        self.lock = threading.RLock()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        # bounded, of compact entries: `serve --emulate` runs for days as a demo and under fuzzing
        # (benchmarks/robustness.py); positions stay comparable through `log_mark()`, which counts
        # every request ever logged
        self._log: collections.deque[LogEntry] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        self._log_dropped = 0
        self._buckets: dict[str, TokenBucket] = {}
        self._in_flight: collections.Counter[str] = collections.Counter()  # by HTTP method
        self._host, self._port = host, port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- hooks for subclasses ----
    def authenticate(self, request: Request) -> Any:
        """Return the caller's identity or raise HttpProblem(401/403). Default: everyone allowed."""
        return None

    def error_body(self, status: int, message: str) -> Any:
        """The cloud's JSON error shape."""
        return {"code": status, "message": message}

    def snapshot(self) -> dict[str, Any]:
        """State to persist (JSON-serialisable)."""
        return {}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Load state saved by `snapshot()`."""

    # ---- routing ----
    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Register `handler` for `method` and a path like "/v1/servers/{id}" (params match one segment)."""
        regex = (
            "^"
            + _PARAM_RE.sub(r"(?P<\1>[^/]+)", re.escape(pattern).replace(r"\{", "{").replace(r"\}", "}"))
            + "/?$"
        )
        self._routes.append((method.upper(), re.compile(regex), handler))

    def _match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        path_known = False
        for m, regex, handler in self._routes:
            found = regex.match(path)
            if found:
                path_known = True
                if m == method:
                    return handler, found.groupdict()
        if path_known:
            raise HttpProblem(405, f"method {method} not allowed on {path}")
        raise HttpProblem(404, f"no such resource: {path}")

    # ---- lifecycle ----
    def start(self) -> Self:
        if self.state_file and self.state_file.exists():
            with self.lock:
                self.restore(json.loads(self.state_file.read_text()))
        emulator = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out as two writes; without TCP_NODELAY the body waits for the
            # client's delayed ACK of the headers (~40 ms per keep-alive request on Linux)
            disable_nagle_algorithm = True
            server_version = f"{emulator.name}-emulator"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s: " + format, emulator.name, *args)

            def _serve(self) -> None:
                emulator._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

        self._httpd = ThreadingHTTPServer((self._host, self._port), _Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}-emulator",
            daemon=True,
        )
        self._thread.start()
        # debug: `emulate` prints its own listening line on stdout, and `serve --emulate` names the
        # emulator in its serving line; two lines for one event confused users
        log.debug("%s emulator listening on %s", self.name, self.base_url)
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.save_state()

    def __enter__(self) -> EmulatorServer:
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("emulator not started")
        return int(self._httpd.server_address[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.address}{self.prefix}"

    # ---- inspection ----
    def request_log(self, since: int = 0) -> list[LogEntry]:
        """The requests logged since `since` (a `log_mark()`), oldest first, of the newest
        REQUEST_LOG_SIZE ones kept."""
        with self.lock:
            return list(self._log)[max(0, since - self._log_dropped) :]

    def log_mark(self) -> int:
        """How many requests were ever logged: a position `request_log(since=...)` understands."""
        with self.lock:
            return self._log_dropped + len(self._log)

    def clear_log(self) -> None:
        with self.lock:
            self._log_dropped += len(self._log)
            self._log.clear()

    def keep_history(self, requests: int) -> None:
        """From now on remember only the newest `requests` requests (the request log, and whatever a
        subclass keeps per request). `serve --emulate` calls it: there the emulator serves the
        server's own client in the same process, nothing can read its history, and a history of
        REQUEST_LOG_SIZE requests was most of what such a server grew by under fuzzing."""
        with self.lock:
            self._log_dropped += max(0, len(self._log) - requests)
            self._log = collections.deque(self._log, maxlen=requests)

    def reset_rate_limits(self) -> None:
        """Forget every client's request budget (each starts again with a full bucket)."""
        with self.lock:
            self._buckets.clear()

    def set_faults(self, plan: FaultPlan | None) -> None:
        self.faults = plan or FaultPlan.none()

    def save_state(self) -> None:
        if self.state_file is None:
            return
        with self.lock:
            data = json.dumps(self.snapshot(), indent=1, sort_keys=True)
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(data)
        os.replace(tmp, self.state_file)

    # ---- request handling ----
    def _throttled(self, client: str) -> bool:
        if not self.rate_limit_per_s:
            return False
        with self.lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                burst = max(1.0, self.rate_limit_per_s)
                bucket = self._buckets[client] = TokenBucket(
                    self.rate_limit_per_s, burst, clock=self._bucket_clock
                )
        return not bucket.try_acquire()

    def _record(self, req: Request, status: int | None, fault: str | None, processed: bool) -> None:
        with self.lock:
            if len(self._log) == self._log.maxlen:
                self._log_dropped += 1  # the oldest entry makes room
            self._log.append(
                LogEntry(
                    self.clock(), sys.intern(req.method), req.path, req.raw_query, status, fault, processed
                )
            )

    def in_flight(self, method: str | None = None) -> int:
        """Requests received whole and not answered yet, of one HTTP method or all: a test can tell
        that a client is waiting for an answer (a slow fault may finish after its client gave up). A
        request whose body is still arriving does not count: its client has not finished sending."""
        with self.lock:
            return self._in_flight[method] if method else sum(self._in_flight.values())

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        split = urlsplit(h.path)
        try:
            body = _read_body(h)
        except ValueError as exc:
            # framing we cannot follow: the rest of the connection cannot be read as requests either
            h.close_connection = True
            req = Request(h.command, split.path, {}, h.headers, b"", h.client_address[0])
            self._reply(h, req, Response(400, self.error_body(400, f"Bad Request: {exc}")), None)
            return
        req = Request(h.command, split.path, parse_qs(split.query), h.headers, body, h.client_address[0])
        req.raw_query = split.query
        with self.lock:
            self._in_flight[req.method] += 1
        try:
            self._serve_one(h, req)
        finally:
            with self.lock:
                self._in_flight[req.method] -= 1

    def _serve_one(self, h: BaseHTTPRequestHandler, req: Request) -> None:
        fault = self.faults.choose(req.method)
        kind = fault[0] if fault else None
        if kind == "throttle" or self._throttled(req.client):
            headers: dict[str, str | None] = {}
            if self.faults.retry_after:
                headers["Retry-After"] = self.faults.retry_after
            self._reply(
                h,
                req,
                Response(429, self.error_body(429, "Too Many Requests"), headers),
                kind or "rate_limit",
            )
            return
        if fault and kind == "error":
            self._reply(h, req, Response(fault[1], self.error_body(fault[1], "Internal Server Error")), kind)
            return
        if kind == "slow":
            time.sleep(self.faults.slow_seconds)
        resp = self._dispatch(req)
        if kind == "drop":
            self._record(req, None, kind, True)
            h.close_connection = True
            return
        if fault and kind == "error_after":
            resp = Response(fault[1], self.error_body(fault[1], "Bad Gateway"))
        self._reply(h, req, resp, kind, processed=True)

    def _dispatch(self, req: Request) -> Response:
        try:
            handler, params = self._match(req.method, req.path)
            req.params = params
            req.principal = self.authenticate(req)
            with self.lock:
                resp = handler(req)
                if req.method in _MUTATING and 200 <= resp.status < 300:
                    self.save_state()
            return resp
        except HttpProblem as p:
            return Response(p.status, self.error_body(p.status, p.message), p.headers)
        except Exception:
            log.exception("%s emulator: handler failed for %s %s", self.name, req.method, req.path)
            return Response(500, self.error_body(500, "internal emulator error"))

    def _reply(
        self,
        h: BaseHTTPRequestHandler,
        req: Request,
        resp: Response,
        fault: str | None,
        processed: bool = False,
    ) -> None:
        if resp.body is None:
            payload = b""
        elif isinstance(resp.body, bytes):
            payload = resp.body
        else:
            payload = json.dumps(resp.body).encode()
        self._record(req, resp.status, fault, processed)
        try:
            h.send_response(resp.status)
            headers = {"Content-Type": "application/json", **resp.headers}
            for k, v in headers.items():
                if v is not None:
                    h.send_header(k, v)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            if payload and req.method != "HEAD":
                h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up (its read timeout fired during a slow answer)
            h.close_connection = True


#: the largest request body read (chunked or not): the emulators' requests are small JSON documents
MAX_BODY = 16 << 20


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request body as framed by Content-Length or by chunked transfer coding (RFC 9112 §7.1:
    hex size lines, optional extensions after ';', a zero-size last chunk, optional trailers).
    Unframed leftovers would otherwise be parsed as the next request on the connection. Raises
    ValueError for framing that does not parse."""
    if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
        body = bytearray()
        while True:
            line = h.rfile.readline(1024)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ValueError("malformed chunk size") from None
            if size < 0 or len(body) + size > MAX_BODY:
                raise ValueError("chunked body too large")
            if size == 0:
                break
            body += h.rfile.read(size)
            if h.rfile.readline(4) not in (b"\r\n", b"\n"):
                raise ValueError("chunk not followed by CRLF")
        while h.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
            pass  # trailer fields: none of the emulated APIs reads them
        return bytes(body)
    text = h.headers.get("Content-Length") or "0"
    try:
        length = int(text)
    except ValueError:
        raise ValueError("malformed Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise ValueError("Content-Length out of range")
    return h.rfile.read(length) if length else b""
