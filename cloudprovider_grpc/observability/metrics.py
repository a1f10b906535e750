"""Every Prometheus metric the process exports, defined once.

Served on the separate plain-HTTP metrics port (see server.py) together with /healthz. Label
values never contain secrets: backends, operation names, status codes and group ids only.
"""

from __future__ import annotations

import bisect
import platform
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import google.protobuf
import grpc
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from cloudprovider_grpc import __version__

# A `*_created` series per labelled child doubles the exposition and tells an operator nothing a
# restart (process_start_time_seconds) does not.
disable_created_metrics()

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 2.5, 5)

RPC_REQUESTS_NAME = "cloudprovider_grpc_rpc_requests"
RPC_REQUESTS_HELP = "externalgrpc RPCs handled, by method and gRPC status code."
RPC_LATENCY_NAME = "cloudprovider_grpc_rpc_duration_seconds"
RPC_LATENCY_HELP = "Time spent handling externalgrpc RPCs, by method and gRPC status code."


class _Tally:
    """Count, sum and per-bucket counts (not cumulative; +Inf last) of one (method, code)."""

    __slots__ = ("buckets", "count", "lock", "total")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)

    def observe(self, seconds: float) -> None:
        # bisect_left: a duration equal to a bound falls in that bound's bucket (le = "<=")
        index = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self.lock:
            self.count += 1
            self.total += seconds
            self.buckets[index] += 1

    def add(self, count: int, total: float, buckets: Sequence[int]) -> None:
        with self.lock:
            self.count += count
            self.total += total
            for i, n in enumerate(buckets):
                self.buckets[i] += n


class RpcSource(Protocol):
    """Tallies kept outside this process's Python code (the compiled front's counters file)."""

    def read(self) -> Iterable[tuple[str, grpc.StatusCode, int, float, list[int]]]: ...


class RpcMetrics:
    """`cloudprovider_grpc_rpc_requests_total` and `cloudprovider_grpc_rpc_duration_seconds`: one
    collector for the calls Python handled and the calls the compiled front answered from its cache.

    Why a custom collector rather than prometheus_client's Counter and Histogram: the front counts in
    a shared file (cloudprovider_grpc/front/counters.py) and both tallies must appear as one series
    per (method, code), with the names, labels, buckets and HELP they always had. A call is counted
    by exactly one side (the front counts only what it answers itself). Cheaper per call too: one
    lock and a bisect, where the two prometheus_client children cost two locks and a bucket scan."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._sources: list[RpcSource] = []

    def tally(self, method: str, code: grpc.StatusCode) -> _Tally:
        key = (method, code.name)
        with self._lock:
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = _Tally()
            return tally

    def add_source(self, source: RpcSource) -> None:
        with self._lock:
            self._sources.append(source)

    def retire_source(self, source: RpcSource) -> None:
        """Fold a source's final counts into the Python tallies (nothing counted is lost when a
        front stops) and stop reading it."""
        for method, code, count, total, buckets in source.read():
            self.tally(method, code).add(count, total, buckets)
        with self._lock:
            self._sources = [s for s in self._sources if s is not source]

    def _snapshot(self) -> dict[tuple[str, str], tuple[int, float, list[int]]]:
        with self._lock:
            tallies, sources = list(self._tallies.items()), list(self._sources)
        merged: dict[tuple[str, str], tuple[int, float, list[int]]] = {}
        for key, t in tallies:
            with t.lock:
                merged[key] = (t.count, t.total, list(t.buckets))
        for source in sources:
            for method, code, count, total, buckets in source.read():
                key = (method, code.name)
                c0, s0, b0 = merged.get(key, (0, 0.0, [0] * len(buckets)))
                summed = [a + b for a, b in zip(b0, buckets, strict=True)]
                merged[key] = (c0 + count, s0 + total, summed)
        return merged

    def collect(self) -> Iterator[Metric]:
        data = self._snapshot()
        requests = CounterMetricFamily(RPC_REQUESTS_NAME, RPC_REQUESTS_HELP, labels=["method", "code"])
        latency = HistogramMetricFamily(RPC_LATENCY_NAME, RPC_LATENCY_HELP, labels=["method", "code"])
        bounds = [*(floatToGoString(b) for b in LATENCY_BUCKETS), "+Inf"]
        for (method, code), (count, total, buckets) in sorted(data.items()):
            requests.add_metric([method, code], count)
            cumulative, running = [], 0
            for bound, n in zip(bounds, buckets, strict=True):
                running += n
                cumulative.append((bound, float(running)))
            latency.add_metric([method, code], cumulative, total)
        yield requests
        yield latency


RPC = RpcMetrics()
REGISTRY.register(RPC)
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
# Named for what the server can see: the cloud's machines, booting or running. Whether they joined
# Kubernetes as nodes only CA knows (it compares its target with the registered nodes).
GROUP_MACHINES = Gauge(
    "cloudprovider_grpc_node_group_machines",
    "Machines the cloud lists for each node group, booting or running (registered as nodes or not).",
    ["backend", "group"],
)
# The join key from a group's id (a UUID on Vultr and Exoscale) to the name the cloud shows for it:
# `* on (backend, group) group_left (name) cloudprovider_grpc_node_group_info`.
GROUP_INFO = Gauge(
    "cloudprovider_grpc_node_group_info",
    "Always 1: each node group's id and the cloud's name for it (a pool label), to join on.",
    ["backend", "group", "name"],
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
BUILD_INFO = Info(
    "cloudprovider_grpc_build",
    "The running version: cloudprovider-grpc, Python, grpcio and protobuf (value 1).",
)
BUILD_INFO.info(
    {
        "version": __version__,
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
    }
)
