"""The compiled front as a child process, and the Python side of its control channel.

The front (main.go) owns the public gRPC port; Python listens on two unix sockets in a private
temporary directory (mode 0700), the link for the unary calls (link.py) and its gRPC server for the
streaming ones, and stays the authority for every answer. Over the front's stdin and
stdout, as JSON lines:

- Python -> front: `start` (addresses, the public one TCP or a unix socket with its mode, the
  private directory, counters file, cacheable methods, the link's methods in index order, memory
  bounds, the TLS file paths), `version` (the provider's state version after every change, pushed
  from whichever thread made it), `closing` (shutdown began: forward everything, so Python's gate
  answers UNAVAILABLE exactly as before) and `stop` (the grace left).
- front -> Python: `ready` (the bound port) or `error`, `log` (logged here through the logger
  `cloudprovider_grpc.front`, so format and secret redaction are unchanged), `backend` (the front
  lost or regained its connection to Python's sockets) and `stopped`.

EOF on the front's stdin means Python is gone (even after kill -9): the front removes the private
directory and exits at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from google.protobuf.descriptor import Descriptor

from cloudprovider_grpc.front.counters import FrontCounters

log = logging.getLogger(__name__)

#: how long the front may take to bind its port and report
START_TIMEOUT = 15.0
#: how long a shutdown waits for the front to confirm its cache is off (it answers in microseconds)
CLOSING_ACK_TIMEOUT = 2.0
#: the front's memory bounds. The cache holds at most MAX_CACHE_BYTES of keys and answers (entries
#: counted with their overhead); requests longer than MAX_KEY are relayed but never cached (CA's are
#: a few hundred bytes; a 4 MiB id is hostile); MEMORY_LIMIT is the Go runtime's soft limit, which
#: makes the collector hand back what requests in flight leave behind. Together they keep the
#: process's resident memory under FRONT_RSS_BOUND (see docs/front.md and benchmarks/front_supervision.py).
MAX_CACHE_BYTES = 16 << 20
MAX_KEY = 64 << 10
MEMORY_LIMIT = 40 << 20
FRONT_RSS_BOUND = 64 << 20


class FrontStartError(Exception):
    """The front could not start. `kind` is "listen" (the address) or anything else (the front)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class FrontProcess:
    def __init__(
        self,
        binary: Path,
        *,
        listen: str,
        socket_mode: int | None = None,
        backend: Path,
        counters: FrontCounters,
        cacheable: list[str],
        link: Path | None = None,
        link_methods: list[str] | None = None,
        link_calls: int = 16,
        maps: dict[str, list[list[int]]] | None = None,
        directory: Path | None = None,
        tls_paths: list[Path] | None = None,
        max_entries: int = 100_000,
        max_bytes: int = MAX_CACHE_BYTES,
        max_key: int = MAX_KEY,
        memory_limit: int = MEMORY_LIMIT,
        on_exit: Callable[[], None] | None = None,
        on_backend: Callable[[bool, str], None] | None = None,
    ) -> None:
        #: called once when the front exits on its own (not through stop or kill)
        self.on_exit = on_exit
        #: called when the front loses (False) or regains (True) its connection to Python's socket
        self.on_backend = on_backend
        self._write_lock = threading.Lock()
        self._ready = threading.Event()
        self._closed_ack = threading.Event()
        self._stopped = threading.Event()
        self._expected_exit = False
        self._outcome: dict[str, Any] = {}
        # versions are pushed by a writer thread: the provider's callback only records the newest one
        self._version_cond = threading.Condition()
        self._pending_version: tuple[int | None] | None = None
        start: dict[str, Any] = {
            "op": "start",
            "listen": listen,
            # a unix socket's path is listened on with this mode (socket.go); TCP otherwise
            "network": "unix" if socket_mode is not None else "tcp",
            "socket_mode": socket_mode or 0,
            "backend": str(backend),
            "counters": str(counters.path),
            "methods": cacheable,
            "link": str(link) if link is not None else "",
            "link_methods": link_methods or [],
            "link_calls": link_calls,
            "maps": maps or {},
            "buckets": list(counters.buckets),
            "max_entries": max_entries,
            "max_bytes": max_bytes,
            "max_key": max_key,
            "memory_limit": memory_limit,
            "dir": str(directory) if directory is not None else "",
            "tls_files": [str(p) for p in tls_paths or []],
        }
        # stdout is the control channel; stderr is inherited for what only a crash prints. An empty
        # environment: the front needs none, and the cloud credentials in ours stay out of its /proc
        self.proc = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, env={}
        )
        assert self.proc.stdin is not None  # stdin=PIPE
        self._stdin: IO[bytes] = self.proc.stdin
        self._send(start)
        threading.Thread(target=self._read_events, name="front-events", daemon=True).start()
        threading.Thread(target=self._push_versions, name="front-versions", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self) -> int:
        """The bound port; raises FrontStartError when the front reported an error or died."""
        if not self._ready.wait(START_TIMEOUT):
            self.kill()
            raise FrontStartError("front", f"the compiled front did not start within {START_TIMEOUT:g}s")
        if "port" not in self._outcome:
            self.kill()
            raise FrontStartError(self._outcome.get("kind", "front"), self._outcome.get("message", "exited"))
        return int(self._outcome["port"])

    # ---------------------------------------------------------------- Python -> front
    def _send(self, doc: dict[str, Any]) -> None:
        line = (json.dumps(doc) + "\n").encode()
        with self._write_lock:
            try:
                self._stdin.write(line)
                self._stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the front is gone; its reader thread reports that

    def push_version(self, version: int | None) -> None:
        """The provider's watch_state callback: cheap and non-blocking (the newest version wins)."""
        with self._version_cond:
            self._pending_version = (version,)
            self._version_cond.notify()

    def _push_versions(self) -> None:
        while not self._stopped.is_set():
            with self._version_cond:
                while self._pending_version is None and not self._stopped.is_set():
                    self._version_cond.wait(1.0)
                pending, self._pending_version = self._pending_version, None
            if pending is not None:
                self._send({"op": "version", "version": pending[0]})

    def closing(self, timeout: float = CLOSING_ACK_TIMEOUT) -> bool:
        """Tell the front that shutdown began and wait (at most `timeout`) until it says its cache is
        off: a call that arrives after this returns reaches Python's gate and answers UNAVAILABLE,
        never a cached answer. False when no acknowledgement came (the front is gone or stuck; its
        supervision reports that)."""
        self._closed_ack.clear()
        self._send({"op": "closing"})
        return self._closed_ack.wait(timeout)

    def stop(self, grace: float) -> None:
        """Graceful stop bounded by `grace` (the front cancels what still runs then); waits for the
        process to exit."""
        self._expected_exit = True
        self._send({"op": "stop", "grace": max(grace, 0.0)})
        try:
            self.proc.wait(max(grace, 0.0) + 2.0)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self._expected_exit = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def _close(self) -> None:
        self._stopped.set()
        with self._version_cond:
            self._version_cond.notify_all()
        with contextlib.suppress(OSError):
            self._stdin.close()

    # ---------------------------------------------------------------- front -> Python
    def _read_events(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("ev")
            if kind == "ready":
                self._outcome["port"] = event.get("port", 0)  # none for a unix socket
                self._ready.set()
            elif kind == "error":
                self._outcome.update(kind=event.get("kind", "front"), message=event.get("message", ""))
                self._ready.set()
            elif kind == "log":
                log.log(_LEVELS.get(event.get("level", ""), logging.WARNING), "%s", event.get("message", ""))
            elif kind == "closing":
                self._closed_ack.set()
            elif kind == "backend" and self.on_backend is not None:
                self.on_backend(bool(event.get("up")), str(event.get("message", "")))
        code = self.proc.wait()
        self._ready.set()
        self._close()
        if not self._expected_exit:
            log.error("the compiled front exited unexpectedly (status %s); the gRPC port is closed", code)
            if self.on_exit is not None:
                self.on_exit()


def map_field_paths(message: Descriptor, prefix: tuple[int, ...] = (), depth: int = 4) -> list[list[int]]:
    """Field-number paths of the map fields in `message` and its singular sub-messages: the front sorts
    their entries in its cache keys, since Go clients (CA) encode map entries in random order."""
    paths: list[list[int]] = []
    for field in message.fields:
        if field.message_type is None:
            continue
        path = (*prefix, field.number)
        if field.message_type.GetOptions().map_entry:
            paths.append(list(path))
        elif not field.is_repeated and depth > 0:
            paths += map_field_paths(field.message_type, path, depth - 1)
    return paths
