"""The standard gRPC health and reflection services, registered through our raw-bytes handlers.

Why not grpcio's own registration helpers: their handlers let grpcio deserialize, and a body that does
not parse then logs a traceback and keeps memory for good (see rawparse); ours answer INVALID_ARGUMENT.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"]
REFLECTION_SERVICE = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]


class HealthService(health.HealthServicer):
    """The standard health service, plus a way to end open Watch streams at shutdown: they never end
    on their own, and grpcio's graceful stop waits for every open call until the grace runs out."""

    def end_watches(self) -> None:
        with self._lock:
            callbacks = [cb for cbs in self._send_response_callbacks.values() for cb in cbs]
        for callback in callbacks:
            callback(None)  # the blocking watcher's iterator ends: the stream closes with OK


def add_standard_services(server: grpc.Server) -> tuple[HealthService, dict[str, grpc.RpcMethodHandler]]:
    """Health and reflection on `server`; returns the health servicer (its status starts unset) and the
    handlers by full method name."""
    servicer = HealthService()
    handlers = rawparse.add_raw_service(server, HEALTH_SERVICE, servicer)
    handlers |= rawparse.add_raw_service(
        server,
        REFLECTION_SERVICE,
        reflection.ReflectionServicer((SERVICE_NAME, HEALTH_SERVICE.full_name, reflection.SERVICE_NAME)),
    )
    return servicer, handlers


def set_serving(servicer: HealthService, serving: bool) -> None:
    """The overall status and the CloudProvider service's, together."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        servicer.set(name, status)
