"""The metrics and health HTTP port: /metrics for Prometheus, /healthz and /readyz for kubelet probes,
/status (JSON; HTML for a browser that asks for it) and /status.html for people (status.py).

/healthz answers 200 only while the server's `serving` flag is up: from the start of gRPC serving
until shutdown begins, and never while the gRPC port is unreachable (the compiled front down or cut
off from Python). /readyz also requires leadership when leader election is on; /readyz/replica
requires only that a leader-elected replica's pod is labelled for its role (leader or standby):
the readiness probe of such a pod, which a Service tells apart by that label (podrole.py).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from cloudprovider_grpc.core.addresses import split_host_port
from cloudprovider_grpc.core.secrets import redact

log = logging.getLogger(__name__)

#: a prober or scraper that hung up before its answer was written (its own timeout ran out)
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class Serving(Protocol):
    @property
    def serving(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    @property
    def replica_ready(self) -> bool: ...


def http_address(address: str) -> tuple[str, int]:
    """Where to bind: an empty host is every interface."""
    host, port = split_host_port(address, "metrics_address")
    return host or "0.0.0.0", port


class _MetricsHandler(BaseHTTPRequestHandler):
    server: _MetricsServer

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/metrics":
            # label values are ids and codes, never secrets; redacting the page makes that a guarantee
            body = redact(generate_latest(REGISTRY).decode()).encode()
            ctype, code = CONTENT_TYPE_LATEST, 200
        elif (path := self.path.split("?")[0]) in ("/healthz", "/readyz", "/readyz/replica"):
            handle = self.server.handle_ref
            # /readyz: the leader only; /readyz/replica: a leader or a standby labelled as one
            readiness = path != "/healthz"
            ok = handle is not None and (
                handle.serving
                if not readiness
                else handle.ready
                if path == "/readyz"
                else handle.replica_ready
            )
            problem = (
                b"not ready\n" if readiness and handle is not None and handle.serving else b"shutting down\n"
            )
            body, ctype, code = (b"ok\n" if ok else problem), "text/plain", (200 if ok else 503)
        elif self.path.split("?")[0] in ("/status", "/status.html"):
            body, ctype, code = self._status()
        else:
            body, ctype, code = b"not found\n", "text/plain", 404
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self) -> tuple[bytes, str, int]:
        from cloudprovider_grpc.server import status

        build = self.server.status_ref
        if build is None:
            return b"no status\n", "text/plain", 404
        doc = build()
        wants_html = self.path.split("?")[0] == "/status.html" or "text/html" in self.headers.get(
            "Accept", ""
        )
        if wants_html:
            return status.to_html(doc).encode(), "text/html; charset=utf-8", 200
        return status.to_json(doc).encode(), "application/json", 200

    def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a log line
        return


class _MetricsServer(ThreadingHTTPServer):
    #: what the probes ask (set before serving starts); the builder of the /status document
    handle_ref: Serving | None = None
    status_ref: Callable[[], dict[str, Any]] | None = None

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up before its answer is not an error of ours (a probe whose timeout
        ran out on a busy machine); anything else is one log line, never a traceback on stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, _CLIENT_GONE):
            return
        log.error("metrics port: a request failed: %s: %s", type(exc).__name__, exc)


def start_metrics_http(
    address: str, serving: Serving, status: Callable[[], dict[str, Any]] | None = None
) -> ThreadingHTTPServer:
    """Bind `address` and serve on a daemon thread; raises OSError when the address is taken.
    `status` builds the document /status serves (none: 404)."""
    httpd = _MetricsServer(http_address(address), _MetricsHandler)
    httpd.daemon_threads = True
    httpd.handle_ref = serving
    httpd.status_ref = status
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="metrics-http", daemon=True
    ).start()
    return httpd
