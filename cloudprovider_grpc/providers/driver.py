"""What one cloud package implements: a small driver over its API client.

A driver only lists, creates and deletes machines and describes its groups; it knows nothing of
gRPC, target sizes, retries of whole operations, caches or threads. `ManagedProvider`
(providers/managed.py) turns any driver into a full `CloudProvider`. Driver methods may do
network I/O; the managed layer calls them only from Refresh and from its background workers,
never from a read RPC. Exceptions: I/O failures must be raised as `CloudError`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field

from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import ErrorClass, InstanceError, InstanceState, NodeRef

#: Labels that mark control-plane nodes; such nodes never belong to an autoscaled group.
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane")


class CloudError(Exception):
    """A failed cloud call.

    `transient` is True when trying again later may succeed (connection errors, timeouts, 408, 429,
    5xx): for a create, the outcome is then unknown and the managed layer looks for the machine by
    its creation token before creating again. `error_class` classifies permanent failures for CA
    (OUT_OF_RESOURCES for stockouts and quota, OTHER otherwise). `code` is a short machine-readable
    reason shown to CA in InstanceErrorInfo.errorCode. The message must not contain secrets.
    """

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        error_class: ErrorClass = ErrorClass.OTHER,
        code: str = "",
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.error_class = error_class
        self.code = code or (
            "OUT_OF_RESOURCES" if error_class == ErrorClass.OUT_OF_RESOURCES else "CLOUD_ERROR"
        )
        self.status = status

    def as_instance_error(self) -> InstanceError:
        return InstanceError(code=self.code, message=self.message, error_class=self.error_class)


class MachineGone(CloudError):
    """The machine does not exist (any more); deleting it is then already done."""

    def __init__(self, message: str = "machine not found") -> None:
        super().__init__(message, code="NOT_FOUND", status=404)


@dataclass(frozen=True)
class Machine:
    """A machine as the cloud lists it.

    `id` is the providerID its Node will carry ("cherryservers://123"). `state` is RUNNING,
    CREATING (booting/deploying) or DELETING (terminating). `token` is the creation token the
    managed layer passed to `create_machine` and the driver stored on the machine (a tag, label or
    name suffix), "" for machines created elsewhere; it is what makes creation idempotent across
    timeouts and restarts.
    """

    id: str
    group: str
    state: InstanceState = InstanceState.RUNNING
    name: str = ""
    token: str = ""
    error: InstanceError | None = None


@dataclass(frozen=True)
class GroupConfig:
    """A node group as configured: bounds plus optional per-group autoscaling option overrides.

    `options` keys are `AutoscalingOptions` field names. An empty mapping means "no overrides",
    and NodeGroupGetOptions then answers UNIMPLEMENTED for the group (see contract.options).
    """

    id: str
    min_size: int
    max_size: int
    debug: str = ""
    options: Mapping[str, object] = field(default_factory=dict)


class Driver(abc.ABC):
    """The per-cloud part of a backend. Subclasses set `name` and `id_prefix`."""

    #: backend name for logs and metrics ("cherry")
    name: str = "driver"
    #: providerID prefix of this cloud's machines ("cherryservers://"); placeholders for machines
    #: not yet created are `<id_prefix>pending-<token>` so CA can delete them like any instance
    id_prefix: str = "driver://"
    #: label set by the cloud's GPU nodes (GPULabel RPC)
    gpu_label: str = ""

    @abc.abstractmethod
    def groups(self) -> list[GroupConfig]:
        """The configured node groups (from memory)."""

    @abc.abstractmethod
    def list_machines(self) -> list[Machine]:
        """Every machine of every configured group, from as few API calls as the API allows
        (one paginated list for Cherry). Called once per Refresh."""

    @abc.abstractmethod
    def create_machine(self, group: str, token: str) -> Machine:
        """Create one machine in `group`, storing `token` on it so `list_machines` reports it.

        Must not retry on its own after the request may have reached the cloud: the managed layer
        decides, after looking the token up, whether to create again."""

    @abc.abstractmethod
    def delete_machine(self, machine: Machine) -> None:
        """Delete the machine; raise MachineGone (or return) if it no longer exists."""

    def refresh_catalog(self) -> None:
        """Reload slow-changing data (plans, prices, images). Called on Refresh when stale."""
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

    def close(self) -> None:
        """Release clients and sessions."""
        return None
