"""The raw-bytes handlers: every CloudProvider RPC as `handle(request bytes, context) -> bytes`.

Why not let grpcio deserialize: a body that does not parse makes grpcio log a full traceback at
error level and keeps about 19 KB per failed request alive for good (RSS 58 -> 524 MB over 50,000
fuzzed requests; it reproduces on a bare grpcio server). Parsing here answers INVALID_ARGUMENT with
one line and costs nothing afterwards. The same handlers serve grpcio (`register`), the compiled
front's link (front/link.py) and the simulator's in-process transport (simulator/client.py), so every
caller meets one implementation: admission at shutdown (admission.py), the parse of the request
bytes, the hand-over relay of a leader-elected replica, the state-version trailer the front caches
by, and the status mapping (outcome.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor

from cloudprovider_grpc.core.errors import InvalidArgument
from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.admission import ShuttingDown
from cloudprovider_grpc.grpcapi.outcome import invoke
from cloudprovider_grpc.grpcapi.prebuilt import Prebuilt
from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.ha.handover import WRITES
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb

#: the RPCs CA asks per node, which the compiled front answers from its cache
CACHEABLE = ("NodeGroupGetOptions", "NodeGroupForNode", "NodeGroupTargetSize")
#: the trailer carrying the provider's state version to the front (stripped there, never seen by CA)
VERSION_TRAILER = "cpg-state-version"


def _send_version(
    context: grpc.ServicerContext, before: int | None, after: int | None, cacheable: bool
) -> None:
    """`N`: the state is at version N and this answer belongs to it; `N!`: raise to N, but do not
    store this answer (the state changed while it was computed, or the RPC is not cacheable)."""
    if after is None:
        return
    store = cacheable and before == after
    context.set_trailing_metadata(((VERSION_TRAILER, str(after) if store else f"{after}!"),))


def raw_call(servicer: CloudProviderServicer, method: MethodDescriptor) -> Callable[[bytes, Any], bytes]:
    """The request path of one RPC, as a handler that gets the request as bytes and returns bytes:
    `handle(raw, context)`, what grpcio, the compiled front's link and the in-process transport all
    call. A servicer method may also return ready-made response bytes, or a Prebuilt answer whose
    bytes are sent."""
    name = method.name
    impl = getattr(type(servicer), name).__wrapped__
    parse_or_none = rawparse.parser(method)

    def parse(raw: bytes) -> Any:
        request = parse_or_none(raw)
        if request is None:
            raise InvalidArgument(rawparse.malformed_message(method, len(raw)))
        return request

    gate = servicer.gate
    provider = servicer.provider
    # Behind the compiled front, every answer carries the provider's state version in its trailer
    # (see cloudprovider_grpc/front), read AFTER the call ran, so the front knows of a change made by
    # a write or Refresh before the caller does. A read is cacheable only when the version was the
    # same before and after it was computed: then it belongs to that version.
    behind_front = servicer.behind_front
    cacheable = name in CACHEABLE
    # with leader election, writes (and, once a hand-over began, every call) pass the hand-over relay
    relay = servicer.relay
    write = name in WRITES

    def call(raw: bytes, context: grpc.ServicerContext) -> bytes:
        if not gate.enter():
            raise ShuttingDown(f"{name}: the server is shutting down; the request was not executed")
        before = provider.state_version() if behind_front and cacheable else None
        try:
            if relay is not None and (write or relay.engaged):
                response = relay.call(name, raw, context, lambda: impl(servicer, parse(raw), context))
            else:
                response = impl(servicer, parse(raw), context)
        finally:
            gate.leave()
            if behind_front:
                _send_version(context, before, provider.state_version(), cacheable)
        if isinstance(response, Prebuilt):
            return response.raw
        return response if isinstance(response, bytes) else response.SerializeToString()

    def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
        return invoke(name, context, call, raw, context)

    return handle


def raw_calls(servicer: CloudProviderServicer) -> dict[str, Callable[[bytes, Any], bytes]]:
    """Every RPC of the service descriptor as `handle(raw request, context) -> raw response`, by
    method name: the one implementation behind every caller."""
    service = pb.DESCRIPTOR.services_by_name["CloudProvider"]
    return {m.name: raw_call(servicer, m) for m in service.methods}


def method_handlers(servicer: CloudProviderServicer) -> dict[str, grpc.RpcMethodHandler]:
    """Every RPC of the service descriptor as a grpcio raw-bytes handler, by method name."""
    return {name: grpc.unary_unary_rpc_method_handler(call) for name, call in raw_calls(servicer).items()}


def register(server: grpc.Server, servicer: CloudProviderServicer) -> dict[str, grpc.RpcMethodHandler]:
    """Serve `servicer` on `server` through the raw-bytes handlers; returns them by method name."""
    handlers = method_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    return handlers
