"""What an RPC's outcome becomes on the wire: its status code, a caller-safe message, its metrics.

Why one place: every RPC, whoever calls it (grpcio, the compiled front's link, the simulator's
in-process transport), ends here, so CA never sees UNKNOWN or a stack trace, no registered secret
reaches a status message, and every call is counted by method and status code. ProviderError
subclasses carry their status code; anything else is a bug and becomes INTERNAL with a generic
message (the traceback goes to the log).
The metric tallies are resolved once per (method, code) and kept (RpcTimer): recording a metric
must cost next to nothing on RPCs that answer in microseconds.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from cloudprovider_grpc.core.errors import ProviderError
from cloudprovider_grpc.core.secrets import redact
from cloudprovider_grpc.grpcapi.admission import ShuttingDown
from cloudprovider_grpc.grpcapi.prebuilt import Prebuilt
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.observability import metrics, tracing

# the servicer's logger: these lines are about its RPCs, and operators filter on its name
log = logging.getLogger(__name__)

R = TypeVar("R")


class RpcTimer:
    """Pre-resolved metric tallies per (method, code): label lookups are the costliest part of
    recording a metric, and these RPCs must stay well under a millisecond. Keyed by the status enum
    itself: reading `code.name` on every call cost more than the dictionary lookup."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, grpc.StatusCode], Any] = {}

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        key = (method, code)
        tally = self._children.get(key)
        if tally is None:
            tally = self._children.setdefault(key, metrics.RPC.tally(method, code))
        tally.observe(seconds)


_TIMER = RpcTimer()


#: longest message we send back: ids are echoed in messages, and a status message travels in HTTP/2
#: metadata, which grpcio caps at 8 KiB by default; a longer one turns NOT_FOUND into RESOURCE_EXHAUSTED
MAX_MESSAGE = 1024
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)}


def safe_message(message: str, limit: int = MAX_MESSAGE) -> str:
    """One line, at most `limit` characters, no registered secret: control characters are escaped,
    and an overlong message keeps its head and tail (the echoed input is usually in between) with a
    note of what was cut."""
    line = redact(message).translate(_CONTROL)
    if len(line) <= limit:
        return line
    keep = (limit - 60) // 2
    omitted = len(line) - 2 * keep
    return f"{line[:keep]}...[{omitted} of {len(line)} characters omitted]...{line[-keep:]}"


def invoke(method: str, context: grpc.ServicerContext, call: Callable[..., R], *args: Any) -> R:
    """The one place that turns a handler's outcome (`call(*args)`) into a gRPC status and records its
    metrics. Arguments are passed through rather than bound in a closure: no allocation per call.

    ProviderError carries its status and a caller-safe message; anything else is a bug and becomes
    INTERNAL with a generic message (the traceback goes to the log only), so CA never sees UNKNOWN."""
    start = time.perf_counter()
    code = grpc.StatusCode.OK
    span = tracing.start_rpc(SERVICE_NAME, method) if tracing.TRACER is not None else None
    try:
        return call(*args)
    except ProviderError as exc:
        code = exc.code
        message = safe_message(exc.message)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL) and not isinstance(
            exc, ShuttingDown
        ):
            log.warning("%s failed: %s", method, message)
        context.abort(code, message)
    except Exception:
        code = grpc.StatusCode.INTERNAL
        log.exception("%s failed unexpectedly", method)
        context.abort(code, f"{method}: internal error in cloudprovider-grpc (details in the server log)")
    finally:
        _TIMER.observe(method, code, time.perf_counter() - start)
        if span is not None:
            tracing.end_rpc(span, code)
    raise AssertionError("unreachable")  # context.abort always raises


def rpc(fn: Callable[..., R]) -> Callable[..., R]:
    """A typed handler (request message in, response message out) guarded by `invoke`; the
    undecorated function stays reachable as `__wrapped__` for the raw-bytes path (handlers.py)."""
    method = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> R:
        response = invoke(method, context, fn, self, request, context)
        return response.message if isinstance(response, Prebuilt) else response

    return wrapper
