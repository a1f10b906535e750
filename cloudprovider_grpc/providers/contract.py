"""The contract between the gRPC service and a cloud backend.

`CloudProvider` is what the service calls, one method per externalgrpc RPC, in CA's own terms.
Every method except `refresh` must answer from memory: CA calls them serially, thousands of times
per loop, under a 5 s deadline, and never retries. Cloud I/O belongs in `refresh` and in background
workers. Most backends do not implement this class directly: they implement the much smaller
`providers.driver.MachineDriver` or `PoolDriver` and get target-size bookkeeping, caches,
background workers and idempotency from `providers.machines.MachineProvider` or
`providers.pools.PoolProvider`.

Errors are raised as `cloudprovider_grpc.core.errors.ProviderError` subclasses; the service maps them
to gRPC status codes.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from cloudprovider_grpc.core.clouderrors import ErrorClass, InstanceError
from cloudprovider_grpc.core.errors import NotImplementedByProvider
from cloudprovider_grpc.k8s.template import NodeTemplate

__all__ = [
    "AutoscalingOptions",
    "CloudProvider",
    "ErrorClass",
    "GroupSizes",
    "Instance",
    "InstanceError",
    "InstanceState",
    "NodeGroup",
    "NodeRef",
]


class InstanceState(enum.IntEnum):
    """externalgrpc InstanceStatus.InstanceState values."""

    UNSPECIFIED = 0
    RUNNING = 1
    CREATING = 2
    DELETING = 3


@dataclass(frozen=True)
class Instance:
    """One machine of a node group as CA sees it. `id` equals the Node's spec.providerID exactly."""

    id: str
    state: InstanceState
    error: InstanceError | None = None


@dataclass(frozen=True)
class NodeGroup:
    id: str
    min_size: int
    max_size: int
    debug: str = ""


@dataclass(frozen=True)
class NodeRef:
    """A node as CA sends it (ExternalGrpcNode). For instances that never registered, CA
    synthesises a node whose name equals its providerID."""

    provider_id: str
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AutoscalingOptions:
    """Per-group autoscaling options in CA's terms (config.NodeGroupAutoscalingOptions).

    Durations are in seconds. The service converts to and from both the new
    google.protobuf.Duration fields and the legacy nanosecond fields.
    """

    scale_down_utilization_threshold: float = 0.5
    scale_down_gpu_utilization_threshold: float = 0.5
    scale_down_unneeded_time: float = 600.0
    scale_down_unready_time: float = 1200.0
    max_node_provision_time: float = 900.0
    zero_or_max_node_scaling: bool = False
    ignore_daemonsets_utilization: bool = False
    #: the time a registered node has to turn Ready (CA's --max-node-startup-time, 15m); carried only
    #: to CA 1.37 and later, which send and read it as NodeGroupAutoscalingOptions field 11
    max_node_startup_time: float = 900.0

    def merged(self, overrides: Mapping[str, object]) -> AutoscalingOptions:
        """These options with the given fields replaced (unknown names raise TypeError)."""
        return replace(self, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class GroupSizes:
    """Sizes reported to metrics: target and machines the cloud holds (running or booting)."""

    target: int
    registered: int


class CloudProvider(abc.ABC):
    """What the gRPC service needs from a backend. See the module docstring for the rules."""

    #: short backend name used in metrics and logs ("sim", "cherry", ...)
    name: str = "unknown"

    # ---- cloud-provider level ----
    @abc.abstractmethod
    def node_groups(self) -> Sequence[NodeGroup]:
        """All groups. Return the same object while the groups are unchanged: the service then
        reuses its encoded answer (1,000 groups cost a millisecond to encode)."""

    @abc.abstractmethod
    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        """The group the node belongs to, or None (control-plane nodes, foreign nodes)."""

    def gpu_label(self) -> str:
        return ""

    def gpu_types(self) -> list[str]:
        return []

    def node_price(self, node: NodeRef, start: datetime, end: datetime) -> float:
        raise NotImplementedByProvider(f"{self.name}: node pricing is not available")

    def pod_price(self, requests: Mapping[str, float], start: datetime, end: datetime) -> float:
        """Price of a pod given its effective requests (cpu in cores, memory in bytes, ...)."""
        raise NotImplementedByProvider(f"{self.name}: pod pricing is not available")

    @abc.abstractmethod
    def refresh(self) -> None:
        """Called before every CA loop: the one place where the read path talks to the cloud."""

    def cleanup(self) -> None:
        return None

    # ---- node-group level (raise NotFound for unknown ids) ----
    def resolve_group(self, ref: str) -> str:
        """The id of the group `ref` names, from memory: `ref` itself when it is an id (ids always
        win), else the id of the one group the cloud names `ref` (a Vultr or Exoscale pool's
        label, which is what `groups` and the status page show next to its UUID). Anything else
        comes back unchanged and the RPC answers NOT_FOUND as for any unknown id."""
        return ref

    # Semantics are CA's NodeGroup interface (cluster-autoscaler cloudprovider/cloud_provider.go).
    @abc.abstractmethod
    def target_size(self, group_id: str) -> int:
        """The size the group should have: machines that exist plus those asked for and not yet
        there. CA compares it with registered nodes to see upcoming nodes and scale-up timeouts,
        so it must move the moment IncreaseSize/DeleteNodes/DecreaseTargetSize is accepted."""

    @abc.abstractmethod
    def increase_size(self, group_id: str, delta: int) -> None:
        """Raise the target by `delta` (> 0, else InvalidArgument); FailedPrecondition when that
        would exceed the max size. Returns once the request is recorded: machines appear later
        (instanceCreating, then running), never waited for here."""

    @abc.abstractmethod
    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        """Delete exactly these nodes (machines or not-yet-created placeholders) and lower the
        target by their number. All or nothing: a node not in the group is InvalidArgument and
        nothing is deleted; going below the min size is FailedPrecondition. Nodes already deleted
        are done (idempotent: CA retries after timeouts)."""

    @abc.abstractmethod
    def decrease_target_size(self, group_id: str, delta: int) -> None:
        """Lower the target by `-delta` (< 0) WITHOUT deleting any existing machine: only requests
        not yet fulfilled are dropped. CA uses it when it no longer expects upcoming nodes; a
        target below the existing machines is FailedPrecondition (use DeleteNodes)."""

    @abc.abstractmethod
    def nodes(self, group_id: str) -> list[Instance]:
        """Every instance of the group, including placeholders for ones being created, each with
        its state and, if creating it failed, errorInfo (class 1 makes CA back off the group)."""

    def template(self, group_id: str) -> NodeTemplate:
        raise NotImplementedByProvider(f"{self.name}: node group {group_id!r} has no template")

    def options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        """Per-group options: `defaults` with the group's overrides applied, or None when the group
        has none (CA then keeps its own defaults: CA 1.35 and later would read a max node startup
        time of 0 from any answered options); NotFound for an unknown group. Never
        NotImplementedByProvider: CA 1.25-1.28 take UNIMPLEMENTED from this RPC as a failure."""
        self.target_size(group_id)  # NotFound for an unknown group
        return None

    # ---- state version (lets a front cache the per-node read answers) ----
    def state_version(self) -> int | None:
        """A number that changes (it only ever increments) whenever an answer of `target_size`,
        `node_group_for_node`, `options` or `node_groups` could differ from before, including a
        group id becoming known or unknown (NOT_FOUND answers are cached too); None when the
        provider cannot tell, and then nothing may be cached.

        Why: CA asks NodeGroupForNode once per node per loop and the answers rarely change, so a
        front can keep each encoded answer and serve it again while the version is unchanged.
        That is only worth it if the version stays put when nothing observable changed, in
        particular across steady-state Refreshes; it is only correct if it moves after every
        change that could alter an answer, and never before the change is visible to readers.
        An answer computed while the version read before and after it was the same belongs to
        that version."""
        return None

    def watch_state(self, callback: Callable[[int], None]) -> None:
        """Call `callback(new_version)` after every change of `state_version()`, from the thread
        that made the change, once the change is visible to readers. Callbacks must be cheap and
        must never block: the shared machinery (providers/machinery/group_core.py) calls them with
        its lock held, so that they arrive in version order whatever thread made each change, and
        every RPC waits meanwhile. The default provider never changes version, so it never calls back."""
        return None

    # ---- operations ----
    def sizes(self) -> dict[str, GroupSizes]:
        """Per-group sizes for metrics; from memory."""
        return {}

    def start(self) -> None:
        """Start background workers (called once by the server before serving)."""
        return None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop background workers, letting in-flight cloud calls finish within timeout."""
        return None
