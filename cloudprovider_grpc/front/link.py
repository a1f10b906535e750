"""The link between the compiled front and Python for the unary calls it relays: length-prefixed
frames on a private unix socket, answered by the very handlers grpcio serves (`unary_calls`).

Why not gRPC on that socket: a relayed call then paid grpc-go's client stack in the front plus
grpcio's whole server stack in Python, which is most of what Python alone costs per call: relayed
calls cost 1.9-2.9x Python alone's CPU. A frame costs one read and one write on each side.

One connection carries one call at a time (cluster-autoscaler calls serially); the front keeps a pool
of them (at most the server's gRPC worker count, `--grpc-workers`). Each connection is served by a thread
of its own, blocking on the socket.

Frames, little-endian:

    request  (front -> Python): u32 length | u16 method index | u32 timeout ms (0: none) | request bytes
    answer   (Python -> front): u32 length | u8 status code | u8 flags | i64 state version |
                                u16 message length | message (UTF-8) | response bytes

flags: 1 = the state version is known, 2 = the answer may be cached for it (see front/cache.go). The
method index is the position in the list the front gets in its start command.

A frame that cannot be a request (shorter than its header, longer than MAX_FRAME) ends the connection
after one answer with a precise status and one rate-limited warning: the socket sits in a 0700
directory, so only a process of the same user can send one.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from cloudprovider_grpc.grpcapi.handlers import VERSION_TRAILER
from cloudprovider_grpc.observability.logs import OncePer

log = logging.getLogger(__name__)

#: the largest request frame: grpcio's (and the front's) 4 MiB request limit plus the header
MAX_FRAME = (4 << 20) + 6
_REQUEST = struct.Struct("<IHI")
_ANSWER = struct.Struct("<IBBqH")
_CODES = {c: c.value[0] for c in grpc.StatusCode}
_VERSION_KNOWN, _STORABLE = 1, 2

Call = Callable[[bytes, Any], bytes]


class Aborted(Exception):
    """context.abort on the link: the handler's status and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LinkContext:
    """What the handlers use of grpcio's ServicerContext: abort, set_code and set_details (the health
    check's unknown service), and the trailer that carries the state version (see
    handlers._send_version), which the link sends in the answer's header."""

    __slots__ = ("code", "deadline", "details", "version")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.version: str | None = None
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        for key, value in metadata:
            if key == VERSION_TRAILER:
                self.version = value

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)


def answer(
    code: int, message: str = "", body: bytes = b"", version: str | None = None
) -> tuple[bytes, bytes]:
    """One answer frame as (header and message, response bytes): sent together without joining them
    (a NodeGroups answer is tens of KB). `version` is the trailer text: "N" (storable) or "N!"
    (raise only)."""
    flags, number = 0, 0
    if version is not None:
        text = version.rstrip("!")
        flags = _VERSION_KNOWN if text != version else _VERSION_KNOWN | _STORABLE
        number = int(text)
    text_bytes = message.encode()[:0xFFFF]
    size = _ANSWER.size - 4 + len(text_bytes) + len(body)
    return _ANSWER.pack(size, code, flags, number, len(text_bytes)) + text_bytes, body


def _send(conn: socket.socket, parts: tuple[bytes, bytes]) -> None:
    head, body = parts
    sent = conn.sendmsg(parts)
    if sent < len(head) + len(body):  # a signal interrupted it midway
        conn.sendall((head + body)[sent:])


def unary_calls(handlers: dict[str, grpc.RpcMethodHandler]) -> dict[str, Call]:
    """The unary-unary ones of grpcio's method handlers (by full method name) as link calls: the very
    code grpcio runs for them, raw bytes in and out."""
    calls: dict[str, Call] = {}
    for method, handler in handlers.items():
        if handler.request_streaming or handler.response_streaming:
            continue
        behaviour, serialize = handler.unary_unary, handler.response_serializer
        calls[method] = behaviour if serialize is None else _serialized(behaviour, serialize)
    return calls


def _serialized(behaviour: Call, serialize: Callable[[Any], bytes]) -> Call:
    def call(raw: bytes, context: Any) -> bytes:
        return serialize(behaviour(raw, context))

    return call


class _Warnings:
    """At most one warning a minute about bad frames, with a count of the ones not logged."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)

    def note(self, what: str) -> None:
        suppressed = self._once.due()
        if suppressed is not None:
            log.warning(
                "front link: %s; connection closed (%d more since the last warning)", what, suppressed
            )


class LinkServer:
    """Python's end of the link: accepts connections on `path` once `serve()` is called (until then
    the kernel queues them, and the front's calls wait within their deadline, as they waited for
    grpcio's port before), each served by a thread running `calls[method](request, context)`."""

    def __init__(self, path: Path, calls: dict[str, Call], *, max_connections: int) -> None:
        self.path = path
        self.max_connections = max_connections
        #: the full method names in index order (the front gets them in its start command)
        self.methods = sorted(calls)
        self._calls = [calls[name] for name in self.methods]
        self._warnings = _Warnings()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(path))
            self._sock.listen(max_connections)
        except OSError:
            self._sock.close()
            raise

    def serve(self) -> None:
        threading.Thread(target=self._accept, name="front-link", daemon=True).start()

    def close(self) -> None:
        """Stop accepting and end every connection (a handler still running finishes; its answer
        goes nowhere)."""
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        self._sock.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    @property
    def connections(self) -> int:
        return len(self._conns)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                # the front opens its pool and one connection to watch the link; the margin covers
                # connections it closed that their thread has not seen end yet
                refused = self._closed or len(self._conns) >= self.max_connections
                if not refused:
                    self._conns.add(conn)
            if refused:
                self._warnings.note(f"a connection over the limit of {self.max_connections} refused")
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="front-link-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._loop(conn)
        except OSError:
            pass  # the front went away mid-call: nobody is left to answer
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _loop(self, conn: socket.socket) -> None:
        recv = conn.recv
        pending = b""
        while True:
            while len(pending) < 4:
                chunk = recv(65536)
                if not chunk:
                    if pending:
                        self._warnings.note(f"a frame cut short after {len(pending)} bytes")
                    return
                pending += chunk
            size = int.from_bytes(pending[:4], "little")
            if size > MAX_FRAME - 4 or size < _REQUEST.size - 4:
                self._warnings.note(f"a frame of {size} bytes (6 to {MAX_FRAME - 4})")
                too_long = size > MAX_FRAME - 4
                status = grpc.StatusCode.RESOURCE_EXHAUSTED if too_long else grpc.StatusCode.INVALID_ARGUMENT
                _send(conn, answer(_CODES[status], f"front link: a frame of {size} bytes refused"))
                return
            end = 4 + size
            if len(pending) < end:
                parts = [pending]
                have = len(pending)
                while have < end:
                    chunk = recv(min(end - have, 1 << 20))
                    if not chunk:
                        self._warnings.note(f"a frame cut short after {have} of {end} bytes")
                        return
                    parts.append(chunk)
                    have += len(chunk)
                pending = b"".join(parts)
            _, index, timeout_ms = _REQUEST.unpack_from(pending)
            request, pending = pending[_REQUEST.size : end], pending[end:]
            _send(conn, self._call(index, timeout_ms, request))

    def _call(self, index: int, timeout_ms: int, request: bytes) -> tuple[bytes, bytes]:
        if index >= len(self._calls):
            self._warnings.note(f"a call of method index {index} (0 to {len(self._calls) - 1})")
            return answer(_CODES[grpc.StatusCode.UNIMPLEMENTED], f"front link: no method {index}")
        context = LinkContext(time.monotonic() + timeout_ms / 1000 if timeout_ms else None)
        try:
            body = self._calls[index](request, context)
        except Aborted as exc:
            return answer(_CODES[exc.code], exc.message, version=context.version)
        except Exception:  # the handlers map every error to a status (outcome.invoke): a bug here
            log.exception("front link: %s failed unexpectedly", self.methods[index])
            return answer(_CODES[grpc.StatusCode.INTERNAL], "internal error in cloudprovider-grpc")
        if context.code is not None and context.code != grpc.StatusCode.OK:
            # as grpcio: the status set wins, the caller gets no message
            return answer(_CODES[context.code], context.details, version=context.version)
        return answer(0, body=body, version=context.version)
