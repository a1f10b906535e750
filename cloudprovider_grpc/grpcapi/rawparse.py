"""Request bodies parsed by our own code, for every service the server registers.

Why not let grpcio deserialize: a body that does not parse makes grpcio log a full traceback at
error level, answer INTERNAL, and keep about 16-19 KB per failed request alive for good (RSS grew by
hundreds of MB over 20,000 fuzzed health checks; it reproduces on a bare grpcio server). Handlers
built here receive the request as bytes, parse it themselves and answer INVALID_ARGUMENT with one
rate-limited warning; nothing is kept afterwards. The CloudProvider service (handlers.py) and the
standard health and reflection services all go through this one mechanism.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError

from cloudprovider_grpc.observability.logs import OncePer

log = logging.getLogger(__name__)


class MalformedLog:
    """At most one warning per `interval` seconds about requests whose bodies do not parse, with a
    count of the ones not logged: a fuzzer or a confused client must not flood the log."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)

    def note(self, method: str, size: int) -> None:
        suppressed = self._once.due()
        if suppressed is None:
            return
        log.warning(
            "%s: request body of %d bytes does not parse; answered INVALID_ARGUMENT "
            "(%d more malformed requests since the last warning; at most one warning per %.0fs)",
            method,
            size,
            suppressed,
            self._once.interval,
        )


#: one log for every service: the limit is on the log, not per service
MALFORMED = MalformedLog()


def malformed_message(method: MethodDescriptor, size: int) -> str:
    return f"{method.name}: the request body ({size} bytes) is not a valid {method.input_type.name}"


def parser(method: MethodDescriptor) -> Callable[[bytes], Any | None]:
    """bytes -> the request message, or None (logged through MALFORMED) when the body does not parse.
    upb raises DecodeError for bad wire data and invalid UTF-8 in proto3 strings; the others cover
    the pure-Python implementation."""
    request_type = message_factory.GetMessageClass(method.input_type)

    def parse(raw: bytes) -> Any | None:
        try:
            return request_type.FromString(raw)
        except (DecodeError, RuntimeWarning, ValueError):
            MALFORMED.note(method.name, len(raw))
            return None

    return parse


def _serialize(response: Any) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def raw_method_handler(method: MethodDescriptor, implementation: Callable[..., Any]) -> grpc.RpcMethodHandler:
    """A handler of any shape that parses each request itself and then calls `implementation` exactly
    as grpcio would (a message or an iterator of messages, and the context)."""
    parse = parser(method)

    def one(raw: bytes, context: grpc.ServicerContext) -> Any:
        request = parse(raw)
        if request is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, malformed_message(method, len(raw)))
        return request

    def many(raws: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
        # context.abort raises inside the servicer's loop over its requests; grpcio then sends the
        # status set by abort and logs nothing (the call is marked aborted)
        for raw in raws:
            yield one(raw, context)

    if method.client_streaming:

        def streamed(raws: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            return implementation(many(raws, context), context)

        handler_fn: Callable[..., Any] = streamed
    else:

        def single(raw: bytes, context: grpc.ServicerContext) -> Any:
            return implementation(one(raw, context), context)

        handler_fn = single
    factory = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(method.client_streaming, method.server_streaming)]
    return factory(handler_fn, response_serializer=_serialize)


def add_raw_service(
    server: grpc.Server, service: ServiceDescriptor, servicer: object
) -> dict[str, grpc.RpcMethodHandler]:
    """Register every method of `service`, implemented by the same-named methods of `servicer` (a
    generated servicer class such as grpc_health's HealthServicer), through raw-bytes handlers; returns
    them by full method name ("/package.Service/Method")."""
    handlers = {m.name: raw_method_handler(m, getattr(servicer, m.name)) for m in service.methods}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
    return {f"/{service.full_name}/{name}": handler for name, handler in handlers.items()}
