"""StackPointCloud mapped onto the machine shape (`MachineDriver`): our server owns the size.

SPC adds nodes to a pool by count and names each node's pool in `group_name`; it cannot carry a
creation token, so `create_carries_token` is False: after an add whose outcome is unknown the
machinery never re-sends it and adopts the group's next new node instead. Each machine's `handle` is
the node's `pk`, the only key the API deletes by.

One Refresh costs one GET nodepools (skipped when the `stackpoint-node-pools` override is given) and
one GET nodes; the groups are re-discovered from that listing every time (pools with
`autoscaled: true`, id `autoscaling-<pool instance_id>`, bounds `min_count`/`max_count`).

States (the SDK StackPointCloud/stackpoint-sdk-go `pkg/stackpointio/types.go` at
b87d5ae, read through the justinhopper fork; StackPointCloud/stackpoint-api-docs at f612c5f; the
design notes in StackPointCloud/contrib `cluster-autoscaler/cloudprovider/spc/README.md` at
spc-autoscaler-0.4.3): `draft`, `building`, `provisioned` (and
`provisioning`, the design notes' word) are creating; `running` is running; `deleting`/`deleted` are
deleting; `is_failed` or `failed` is a creating instance with errorInfo (class OTHER), and so is a
node that stays in `draft` longer than `draft-timeout` (failed builds often stayed in draft, so CA
would otherwise wait for them until its own provisioning timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError, MachineGone
from cloudprovider_grpc.formats.spc_machine_specs import spec_of
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, MachineDriver, narrow_groups
from cloudprovider_grpc.providers.spc.client import SpcClient
from cloudprovider_grpc.providers.spc.config import SpcConfig
from cloudprovider_grpc.providers.spc.group_sources import GROUP_PREFIX, Gen1Group
from cloudprovider_grpc.providers.spc.providerid import instance_id, node_name, region_of

log = logging.getLogger(__name__)

ID_PREFIX = "spc://"
#: node labels SPC put on every node it built (fork `spc_cloud_provider.go`, `spc_manager.go`)
NODE_GROUP_LABEL = "stackpoint.io/node_group"
ROLE_LABEL = "stackpoint.io/role"
INSTANCE_ID_LABEL = "stackpoint.io/instance_id"
#: our GPU label on GPU pools' templates (SPC defined none): the pool's `gpu_instance_size`
GPU_LABEL = "stackpoint.io/gpu"
GPU_RESOURCE = "nvidia.com/gpu"

_CREATING = frozenset({"draft", "building", "provisioned", "provisioning"})
_DELETING = frozenset({"deleting", "deleted"})


def parse_pool_labels(text: Any) -> dict[str, str]:
    """A pool's `labels`. The API documents it only as a string (empty in every example); we read
    `k=v` pairs separated by commas or whitespace, and a JSON-style object if one is given."""
    if isinstance(text, Mapping):
        return {str(k): str(v) for k, v in text.items()}
    out: dict[str, str] = {}
    for item in str(text or "").replace(",", " ").split():
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class SpcDriver(MachineDriver):
    name = "spc"
    id_prefix = ID_PREFIX
    gpu_label = GPU_LABEL
    create_carries_token = False

    def __init__(
        self, config: SpcConfig, client: SpcClient, *, clock: Callable[[], float] | None = None
    ) -> None:
        self.config = config
        self.client = client
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._gen1: dict[str, Gen1Group] = {g.group_id: g for g in config.gen1}
        #: group id -> the pool's JSON, from the latest listing
        self._pools: dict[str, Mapping[str, Any]] = {}
        self._groups: list[GroupConfig] = []
        #: node pk -> our clock when we first saw it in `draft`
        self._draft_since: dict[int, float] = {}
        #: SPC instance_id / machine id -> the machine, from the latest listing
        self._by_spc_instance: dict[str, str] = {}
        #: incremented whenever what group_of/machine_of read changes (see fallback_version)
        self._fallback_changes = 0
        self._pk_by_id: dict[str, int] = {}
        self._listed = False
        self._unmatched: set[str] = set()
        self._warned: set[tuple[str, int | None, int | None]] = set()
        self._apply_pools(config.pools_override or (), listed=config.pools_override is not None)

    def __repr__(self) -> str:
        return f"SpcDriver(client={self.client!r})"

    # ------------------------------------------------------------------ groups
    def _apply_pools(self, pools: Sequence[Mapping[str, Any]], *, listed: bool = True) -> None:
        """Discover the groups from a pool listing (or the override file); `listed` False for the
        empty set known before the first listing."""
        found: dict[str, Mapping[str, Any]] = {}
        discovered: list[GroupConfig] = []
        for pool in pools:
            if not pool.get("autoscaled") or not pool.get("instance_id"):
                continue
            gid = GROUP_PREFIX + str(pool["instance_id"])
            lo, hi = _int(pool.get("min_count")), _int(pool.get("max_count"))
            if lo is None or hi is None or lo < 0 or lo > hi:
                if (gid, lo, hi) not in self._warned:  # once, not on every Refresh
                    self._warned.add((gid, lo, hi))
                    log.warning("spc: pool %s has invalid min_count/max_count %r/%r; ignored", gid, lo, hi)
                continue
            found[gid] = pool
            debug = f"spc pool {pool.get('pk')} {pool.get('name') or ''} ({pool.get('instance_size') or '?'})"
            discovered.append(
                GroupConfig(gid, lo, hi, debug=debug.replace("  ", " "), name=str(pool["instance_id"]))
            )
        if listed:
            self.offered = discovered
        for spec in self.config.narrow if listed else ():
            if not any(spec[2] in (g.id, g.name) for g in discovered) and spec[2] not in self._unmatched:
                self._unmatched.add(spec[2])  # logged once: a typo in --nodes must not go unnoticed
                log.warning("spc: --nodes %s:%s:%s names no autoscaled node pool of the cluster", *spec)
        groups = [g for g in narrow_groups(discovered, self.config.narrow) if g.id not in self._gen1]
        for g1 in self._gen1.values():
            groups.append(
                GroupConfig(
                    g1.group_id,
                    g1.min_size,
                    g1.max_size,
                    debug=f"spc gen 1 group ({g1.size})",
                    name=g1.pool_id,
                )
            )
        groups.sort(key=lambda g: g.id)
        with self._lock:
            if [g.id for g in groups] != [g.id for g in self._groups]:
                self._fallback_changes += 1
            self._pools = found
            self._groups = groups

    def groups(self) -> list[GroupConfig]:
        with self._lock:
            return list(self._groups)

    def is_control_plane(self, node: NodeRef) -> bool:
        return node.labels.get(ROLE_LABEL) == "master" or super().is_control_plane(node)

    def group_of(self, node: NodeRef) -> str | None:
        gid = node.labels.get(NODE_GROUP_LABEL)
        if not gid:
            return None
        with self._lock:
            return gid if any(g.id == gid for g in self._groups) else None

    def machine_of(self, node: NodeRef) -> str | None:
        spc_id = node.labels.get(INSTANCE_ID_LABEL)
        if not spc_id:
            return None
        with self._lock:
            return self._by_spc_instance.get(spc_id)

    def fallback_version(self) -> object:
        """A counter, not a snapshot: listings replace the maps outside the machinery's lock (a
        create's token look-up lists too), so a change and its reversal must still both count."""
        with self._lock:
            return self._fallback_changes

    # ------------------------------------------------------------------ listing
    def _state(self, node: Mapping[str, Any], now: float) -> tuple[InstanceState, InstanceError | None]:
        """CA's view of a node's `state`/`is_failed`; call with the lock held (draft clocks)."""
        state = str(node.get("state") or "").strip().lower()
        pk = _int(node.get("pk"))
        if node.get("is_failed") is True or state == "failed":
            return InstanceState.CREATING, InstanceError(
                code="SPC_NODE_FAILED",
                message=f"spc node {node.get('instance_id') or pk} failed to build (state {state or '?'})",
                error_class=ErrorClass.OTHER,
            )
        if state in _DELETING:
            return InstanceState.DELETING, None
        if state == "running":
            return InstanceState.RUNNING, None
        if state == "draft" and pk is not None:
            since = self._draft_since.setdefault(pk, now)
            if now - since >= self.config.draft_timeout:
                return InstanceState.CREATING, InstanceError(
                    code="SPC_NODE_STUCK_IN_DRAFT",
                    message=(
                        f"spc node {node.get('instance_id') or pk} has been in draft for "
                        f"{int(now - since)}s (draft-timeout {self.config.draft_timeout:g}s)"
                    ),
                    error_class=ErrorClass.OTHER,
                )
            return InstanceState.CREATING, None
        if state in _CREATING:
            return InstanceState.CREATING, None
        return InstanceState.RUNNING, None  # an unknown state: CA goes by the Node's readiness

    def _machine(self, node: Mapping[str, Any], group: str, now: float) -> Machine:
        state, error = self._state(node, now)
        mid = instance_id(node, self.config.provider_id_template) or f"{ID_PREFIX}node-{node.get('pk')}"
        return Machine(
            id=mid,
            group=group,
            state=state,
            name=node_name(node),
            error=error,
            handle=str(node.get("pk")),
        )

    def _group_of_node(
        self, node: Mapping[str, Any], groups: set[str], pool_groups: dict[int, str]
    ) -> str | None:
        if str(node.get("role") or "").lower() == "master":
            return None
        gid = str(node.get("group_name") or "")
        if gid in groups:
            return gid
        pool_pk = _int(node.get("pool"))
        if not gid and pool_pk is not None:
            return pool_groups.get(pool_pk)
        return None

    def list_machines(self) -> list[Machine]:
        pools = self.config.pools_override
        if pools is None:
            pools = tuple(self.client.list_node_pools())
        self._apply_pools(pools)
        nodes = self.client.list_nodes()
        now = self._clock()
        machines: list[Machine] = []
        by_spc: dict[str, str] = {}
        pk_by_id: dict[str, int] = {}
        seen: set[int] = set()
        with self._lock:  # no I/O below: the draft clocks and indexes change together
            groups = {g.id for g in self._groups}
            pool_groups = {pk: gid for gid, p in self._pools.items() if (pk := _int(p.get("pk"))) is not None}
            for node in nodes:
                pk = _int(node.get("pk"))
                if pk is None:
                    continue
                gid = self._group_of_node(node, groups, pool_groups)
                if gid is None:
                    continue
                seen.add(pk)
                m = self._machine(node, gid, now)
                machines.append(m)
                pk_by_id[m.id] = pk
                for key in (str(node.get("instance_id") or ""), m.name):
                    if key:
                        by_spc[key] = m.id
            self._draft_since = {pk: t for pk, t in self._draft_since.items() if pk in seen}
            if by_spc != self._by_spc_instance:
                self._fallback_changes += 1
            self._by_spc_instance = by_spc
            self._pk_by_id = pk_by_id
            self._listed = True
        return machines

    # ------------------------------------------------------------------ create / delete
    def create_machine(self, group: str, token: str) -> Machine:
        """Add one node to the group's pool (`token` is ignored: SPC's add cannot carry one)."""
        with self._lock:
            pool = self._pools.get(group)
        gen1 = self._gen1.get(group)
        if pool is not None and _int(pool.get("pk")):
            nodes = self.client.add_to_pool(int(pool["pk"]), str(pool.get("instance_size") or ""), 1)
        elif gen1 is not None:
            nodes = self.client.add_node(group, gen1.size, 1)
        else:
            raise CloudError(f"spc: node group {group!r} has no node pool (any more)", code="NO_POOL")
        if not nodes or _int(nodes[0].get("pk")) is None:
            # probably added, but the answer does not say which node: the next listing adopts it
            raise CloudError("spc add: the answer lists no new node", transient=True, code="BAD_RESPONSE")
        node = next((n for n in nodes if n.get("group_name") == group), nodes[0])
        if node.get("group_name") != group:
            log.warning(
                "spc: new node %s has group_name %r, expected %r",
                node.get("pk"),
                node.get("group_name"),
                group,
            )
        with self._lock:
            return self._machine(node, group, self._clock())

    def _pk(self, machine: Machine) -> int:
        pk = _int(machine.handle)
        if pk is not None:
            return pk
        with self._lock:  # a machine restored from the journal may lack its handle
            found, listed = self._pk_by_id.get(machine.id), self._listed
        if found is not None:
            return found
        if not listed:
            raise CloudError(f"spc: {machine.id} is not listed yet", transient=True, code="NOT_LISTED")
        raise MachineGone(f"spc: {machine.id} is not listed")

    def delete_machine(self, machine: Machine) -> None:
        """DELETE by pk, after the API's own `can_delete` check (it refuses the initial master,
        §B2), so a refusal comes back as the API's reason rather than a failed DELETE."""
        pk = self._pk(machine)
        self.client.can_delete(pk)
        self.client.delete_node(pk)

    # ------------------------------------------------------------------ templates
    def _shape(self, group: str) -> tuple[Mapping[str, Any], str] | None:
        with self._lock:
            pool = self._pools.get(group)
        if pool is not None:
            return pool, str(pool.get("instance_size") or "")
        gen1 = self._gen1.get(group)
        if gen1 is not None:
            return {}, gen1.size
        return None

    def template(self, group: str) -> NodeTemplate | None:
        found = self._shape(group)
        if found is None:
            return None
        pool, size = found
        cpu, memory = _int(pool.get("cpu")), _int(pool.get("memory"))
        if cpu is None or memory is None:  # the documented pool JSON has neither: the SDK table
            spec = spec_of(size)
            if spec is None:
                return None
            cpu, memory = spec.cpu, spec.memory_mb
        if cpu <= 0 or memory <= 0:
            return None
        capacity = {"cpu": str(cpu), "memory": f"{memory}Mi"}
        labels = parse_pool_labels(pool.get("labels"))
        labels.update({NODE_GROUP_LABEL: group, ROLE_LABEL: "worker"})
        gpus = _int(pool.get("gpu_core_count"))
        gpu_size = str(pool.get("gpu_instance_size") or "").strip()
        if gpu_size and gpus and gpus > 0:
            capacity[GPU_RESOURCE] = str(gpus)
            labels[GPU_LABEL] = gpu_size
        zone = str(pool.get("zone") or "").strip()
        reserved = {k: v for k, v in self.config.reserved.items() if k in capacity}
        return NodeTemplate(
            capacity=capacity,
            reserved=reserved,
            labels=labels,
            instance_type=size,
            region=region_of({"zone": zone}) if zone else "",
            zone=zone,
        )

    def gpu_types(self) -> list[str]:
        with self._lock:
            pools = list(self._pools.values())
        return sorted({str(p["gpu_instance_size"]) for p in pools if p.get("gpu_instance_size")})

    def close(self) -> None:
        self.client.close()
