"""Every Prometheus metric the process exports, defined once.

Served on the separate plain-HTTP metrics port (see server.py) together with /healthz. Label
values never contain secrets: backends, operation names, status codes and group ids only.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 2.5, 5)

RPC_REQUESTS = Counter(
    "cloudprovider_grpc_rpc_requests_total",
    "externalgrpc RPCs handled, by method and gRPC status code.",
    ["method", "code"],
)
RPC_LATENCY = Histogram(
    "cloudprovider_grpc_rpc_duration_seconds",
    "Time spent handling externalgrpc RPCs, by method and gRPC status code.",
    ["method", "code"],
    buckets=_LATENCY_BUCKETS,
)
CLOUD_REQUESTS = Counter(
    "cloudprovider_grpc_cloud_api_requests_total",
    "Cloud API requests, by backend, operation and HTTP status (or 'error' when no response).",
    ["backend", "operation", "status"],
)
CLOUD_LATENCY = Histogram(
    "cloudprovider_grpc_cloud_api_duration_seconds",
    "Cloud API request latency, by backend and operation.",
    ["backend", "operation"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
GROUP_TARGET_SIZE = Gauge(
    "cloudprovider_grpc_node_group_target_size",
    "Target size of each node group as reported to cluster-autoscaler.",
    ["backend", "group"],
)
GROUP_REGISTERED_SIZE = Gauge(
    "cloudprovider_grpc_node_group_registered_size",
    "Machines the cloud holds for each node group (running or booting).",
    ["backend", "group"],
)
OPERATIONS = Counter(
    "cloudprovider_grpc_machine_operations_total",
    "Background machine operations, by backend, operation (create/delete) and result.",
    ["backend", "operation", "result"],
)
GROUP_LISTING_FAILURES = Counter(
    "cloudprovider_grpc_node_group_listing_failures_total",
    "Refreshes on which a node group could not be listed (its last known state was kept).",
    ["backend", "group"],
)
SIZE_PUSHES = Counter(
    "cloudprovider_grpc_pool_size_pushes_total",
    "Absolute size changes sent to cloud-owned pools, by backend, group and result.",
    ["backend", "group", "result"],
)
