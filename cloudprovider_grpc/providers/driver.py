"""What one cloud package implements: a small driver over its API client, in one of two shapes.

A driver lists what the cloud holds and changes it; it knows nothing of gRPC, CA's target sizes,
retries of whole operations, caches or threads. The shared machinery turns a driver into a full
`CloudProvider`, and the registry picks which machinery from the driver's type:

- **Machine shape** (`MachineDriver` -> `providers.machines.MachineProvider`): our server owns the
  size. It creates machines one by one, each carrying a creation token (Cherry Servers, SPC, the
  sim cloud's machine mode).
- **Pool shape** (`PoolDriver` -> `providers.pools.PoolProvider`): the cloud owns the desired size.
  We set an absolute size and the cloud creates the instances; removing a named instance lowers the
  size (Vultr VKE, Exoscale, AliCloud ESS, the sim cloud's pool mode).

Both shapes share the read side (`DriverBase`): the group set (which may change on every Refresh:
groups discovered from the cloud), templates, prices, the control-plane rule and a label fallback
for NodeGroupForNode. Driver methods may do network I/O; the machinery calls them only from Refresh
and from its background workers, never from a read RPC. I/O failures must be raised as `CloudError`.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError, MachineGone
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef

__all__ = [
    "CONTROL_PLANE_LABELS",
    "CloudError",
    "DriverBase",
    "GroupConfig",
    "Machine",
    "MachineDriver",
    "MachineGone",
    "MachineListing",
    "Operation",
    "OperationState",
    "OperationStatus",
    "Pool",
    "PoolDriver",
    "RemoveOutcome",
    "narrow_groups",
]

#: Labels that mark control-plane nodes; such nodes never belong to an autoscaled group.
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane")


@dataclass(frozen=True)
class Machine:
    """A machine as the cloud lists it.

    `id` is the providerID its Node will carry ("cherryservers://123", "vultr://<uuid>"). `state`
    is RUNNING, CREATING (booting/deploying) or DELETING (terminating). `token` is the creation token
    the machine shape passed to `create_machine` and the driver stored on the machine (a tag, label
    or name suffix), "" for machines created elsewhere and for every pool-shape machine. `handle` is
    the cloud's own reference the driver needs to act on the machine (a pk, an instance id), so no
    driver has to parse it back out of `id`. `error` is shown to CA as InstanceErrorInfo.
    """

    id: str
    group: str
    state: InstanceState = InstanceState.RUNNING
    name: str = ""
    token: str = ""
    error: InstanceError | None = None
    handle: str = ""


@dataclass(frozen=True)
class GroupConfig:
    """A node group: bounds plus optional per-group autoscaling option overrides.

    `options` keys are `AutoscalingOptions` field names. An empty mapping means "no overrides",
    and NodeGroupGetOptions then answers with no options for the group (see contract.options).
    `name` is the human name (a pool label) for logs; `debug` is what NodeGroup.debug shows.
    """

    id: str
    min_size: int
    max_size: int
    debug: str = ""
    options: Mapping[str, object] = field(default_factory=dict)
    name: str = ""


def narrow_groups(
    discovered: Iterable[GroupConfig], specs: Sequence[tuple[int, int, str]]
) -> list[GroupConfig]:
    """Apply `--nodes MIN:MAX:NAME` specs to groups discovered from the cloud.

    A spec matches a group by id or by name and overrides its bounds. With no specs every
    discovered group is kept; with specs, only the groups they name are (the user listed what CA
    may touch)."""
    from dataclasses import replace

    groups = list(discovered)
    if not specs:
        return groups
    out: list[GroupConfig] = []
    for g in groups:
        spec = next((s for s in specs if s[2] in (g.id, g.name)), None)
        if spec is not None:
            out.append(replace(g, min_size=spec[0], max_size=spec[1]))
    return out


class DriverBase(abc.ABC):
    """The read side every driver has, whatever its shape. Subclasses set `name` and `id_prefix`."""

    #: backend name for logs and metrics ("cherry")
    name: str = "driver"
    #: providerID prefix of this cloud's machines ("cherryservers://"); placeholders for machines
    #: not yet listed are `<id_prefix>pending-...` so CA can delete them like any instance
    id_prefix: str = "driver://"
    #: label set by the cloud's GPU nodes (GPULabel RPC)
    gpu_label: str = ""
    #: every group the last listing discovered, before `--nodes` narrowed them; None for a driver
    #: whose groups `--nodes` itself defines (see `offered_groups`)
    offered: list[GroupConfig] | None = None

    @abc.abstractmethod
    def groups(self) -> list[GroupConfig]:
        """The node groups, from memory. Called after every listing, so a driver that discovers
        groups from the cloud updates them in its listing call and returns the current set here."""

    def offered_groups(self) -> list[GroupConfig] | None:
        """The groups the cloud offers whatever `--nodes` says, so that `check-config` can tell a
        spec that names none of them and suggest the nearest. From the last listing for drivers
        that discover their groups; a driver whose cloud must be asked overrides this (it may do
        I/O: only `check-config` calls it). None: `--nodes` defines the groups, nothing to match."""
        return self.offered

    def refresh_catalog(self) -> None:
        """Reload slow-changing data (plans, instance types, prices, images). Called on Refresh
        when older than the catalogue TTL."""
        return None

    def template(self, group: str) -> NodeTemplate | None:
        """The template for new machines of `group`, from memory; None if unknown."""
        return None

    def hourly_price(self, group: str) -> float | None:
        """Price of one machine of `group` per hour, from memory; None if unknown."""
        return None

    def gpu_types(self) -> list[str]:
        return []

    def is_control_plane(self, node: NodeRef) -> bool:
        return any(label in node.labels for label in CONTROL_PLANE_LABELS)

    def group_of(self, node: NodeRef) -> str | None:
        """Fallback for NodeGroupForNode when the node's providerID is not a listed machine:
        the group id its labels name (SPC's `stackpoint.io/node_group`), or None. From memory."""
        return None

    def machine_of(self, node: NodeRef) -> str | None:
        """Fallback: the providerID of the listed machine the node's labels name (VKE's
        `vke.vultr.com/node-id` label carries the node id), or None. From memory."""
        return None

    def fallback_version(self) -> object:
        """A value (compared with ==) that changes whenever `is_control_plane`, `group_of` or
        `machine_of` could answer differently for the same node: a counter the driver increments
        when the state they read changes, or an immutable snapshot of that state. None: they
        read nothing but the node and fixed configuration.

        Why: the machinery's state version (contract.state_version) must move when a
        NodeGroupForNode answer could change, and these fallbacks read driver state that the
        listing replaces outside the machinery's lock. The machinery compares this value after
        every listing and every background step. A driver that overrides any of the three
        without overriding this is taken to change at every comparison (correct, but a front
        can then cache nothing)."""
        if any(
            getattr(type(self), name) is not getattr(DriverBase, name)
            for name in ("is_control_plane", "group_of", "machine_of")
        ):
            return _Unknown()
        return None

    def close(self) -> None:
        """Release clients and sessions."""
        return None


class _Unknown:
    """A fallback version equal to nothing, not even itself: 'could have changed'."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class MachineListing(list[Machine]):
    """What `MachineDriver.list_machines` may return instead of a plain list: the machines, plus
    `failed`, the groups that could not be listed this time (one project answering 403, say). Their
    last known state is kept and their error shown on their placeholders; the other groups go on
    normally. A plain list means every group was listed."""

    def __init__(
        self, machines: Iterable[Machine] = (), failed: Mapping[str, CloudError] | None = None
    ) -> None:
        super().__init__(machines)
        self.failed: dict[str, CloudError] = dict(failed or {})


class MachineDriver(DriverBase):
    """The machine shape: our server owns the size and creates machines one at a time."""

    #: False for clouds whose create call cannot carry a creation token (SPC): after an unknown
    #: outcome the create is never re-sent; the next listing adopts one new untokened machine of
    #: the group instead.
    create_carries_token: bool = True

    @abc.abstractmethod
    def list_machines(self) -> list[Machine]:
        """Every machine of every group, from as few API calls as the API allows (one paginated
        list per project for Cherry). Called once per Refresh and before re-sending a create whose
        outcome is unknown. Raise CloudError only when nothing could be listed; return a
        `MachineListing` naming the groups that alone failed."""

    @abc.abstractmethod
    def create_machine(self, group: str, token: str) -> Machine:
        """Create one machine in `group`, storing `token` on it so `list_machines` reports it
        (ignored when `create_carries_token` is False).

        Must not retry on its own after the request may have reached the cloud: the machinery
        decides, after looking the token up, whether to create again."""

    @abc.abstractmethod
    def delete_machine(self, machine: Machine) -> None:
        """Delete the machine; raise MachineGone (or return) if it no longer exists."""


# ---------------------------------------------------------------------------------- pool shape


@dataclass(frozen=True)
class Pool:
    """One cloud-owned pool as one listing saw it.

    `desired` is the cloud's own desired size (VKE `node_quantity`, Exoscale `size`, ESS
    `DesiredCapacity`). `machines` are its members with their states. `failure` is the last scaling
    failure the cloud reports for it, while it is still relevant (an ESS scaling activity that
    failed, an Exoscale operation that failed): shown on the group's placeholders. `listing_error`
    set means this pool could not be listed this time: `desired`/`machines` are not to be trusted
    and the machinery keeps what it knew (one broken pool never takes the others down).
    """

    config: GroupConfig
    desired: int
    machines: tuple[Machine, ...] = ()
    failure: InstanceError | None = None
    listing_error: CloudError | None = None


@dataclass(frozen=True)
class Operation:
    """A cloud operation the API accepted but has not finished (an Exoscale operation, an ESS
    scaling activity). The machinery polls it in the background with `PoolDriver.poll`; nothing
    ever waits for it inside an RPC. `kind` is "scale" or "remove"; `ref` is the driver's own id."""

    group: str
    kind: str
    ref: str


class OperationState(enum.Enum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class OperationStatus:
    state: OperationState
    error: InstanceError | None = None  # with FAILED: what CA sees on the placeholders


@dataclass(frozen=True)
class RemoveOutcome:
    """What `remove_machines` did. `failed` maps machine ids that were not removed to why (a
    machine already gone counts as removed, never as failed). `operation`, if any, is polled."""

    failed: Mapping[str, CloudError] = field(default_factory=dict)
    operation: Operation | None = None


class PoolDriver(DriverBase):
    """The pool shape: the cloud owns the desired size of each group."""

    #: True when `remove_machines` lowers the cloud's desired size by the number removed (VKE
    #: DELETE node, Exoscale :evict, ESS RemoveInstances with DecreaseDesiredCapacity); False and
    #: the machinery pushes the lower size itself afterwards.
    remove_lowers_size: bool = True

    @abc.abstractmethod
    def list_pools(self) -> list[Pool]:
        """Every group with its desired size and members, from as few calls as the API allows.
        Called once per Refresh. Raise CloudError only when nothing could be listed; a pool that
        alone failed comes back with `listing_error`."""

    @abc.abstractmethod
    def set_size(self, group: str, size: int) -> Operation | None:
        """Set the cloud's desired size of `group` to the absolute `size`. Safe to retry (the
        machinery retries transient errors). Return the accepted operation if the cloud finishes
        it asynchronously, else None. Never waits for the operation."""

    @abc.abstractmethod
    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        """Remove exactly these machines from `group` (in as few calls as the cloud allows), and
        lower the desired size with them where the cloud allows it (`remove_lowers_size`). Raise
        CloudError when the call as a whole failed (transient: the machinery retries the batch)."""

    def poll(self, operation: Operation) -> OperationStatus:
        """The state of an operation `set_size` or `remove_machines` returned. Called from a
        background worker until it is no longer PENDING."""
        return OperationStatus(OperationState.SUCCEEDED)
