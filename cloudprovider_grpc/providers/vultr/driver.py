"""Vultr VKE node pools mapped onto the pool-shaped driver (`PoolDriver`).

VKE owns each pool's desired size (`node_quantity`): we PATCH an absolute quantity and VKE creates
the nodes; deleting a named node lowers the quantity with it. Groups are the cluster's pools with
`auto_scaler: true`, bounds `min_nodes`/`max_nodes`, re-discovered on every listing as in-tree
(cluster-autoscaler/cloudprovider/vultr/vultr_node_group.go, vultr_manager.go); `--nodes` narrows
them. One paginated list of the cluster's pools (nodes embedded) serves a whole Refresh; plans and
the cluster's region are the catalogue, reloaded only when `catalog_ttl` has passed.

Facts used (kubernetes/autoscaler `cluster-autoscaler/cloudprovider/vultr/`;
vultr/vultr-cloud-controller-manager): providerID `vultr://<node id>` (set by
vultr-cloud-controller-manager); node labels `vke.vultr.com/node-pool` (the pool label) and
`vke.vultr.com/node-id` (the node id); instance-type = plan id; region = the cluster's region.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, MachineGone
from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import (
    GroupConfig,
    Machine,
    Operation,
    Pool,
    PoolDriver,
    RemoveOutcome,
    narrow_groups,
)
from cloudprovider_grpc.providers.vultr.client import VultrClient
from cloudprovider_grpc.providers.vultr.config import VKE_MIN_POOL_NODES, VultrConfig

log = logging.getLogger(__name__)

ID_PREFIX = "vultr://"
LABEL_POOL = "vke.vultr.com/node-pool"
LABEL_NODE_ID = "vke.vultr.com/node-id"
#: No Vultr source names a GPU node label; NVIDIA GPU feature discovery (run by the GPU operator on
#: GPU nodes) sets this one, and CA only needs a label that GPU nodes carry.
GPU_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
#: Vultr prices plans per month; its billing caps a month at 730 hours (our documented assumption:
#: hourly = monthly_cost / 730, the figure the Vultr site shows next to monthly prices)
HOURS_PER_MONTH = 730.0
#: node statuses (govultr fixtures show `pending` and `active`; the full vocabulary is not documented)
_CREATING = frozenset({"pending", "installing", "provisioning", "creating", "recycling"})
_DELETING = frozenset({"deleting", "destroying", "deleted", "removing"})
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def node_state(status: str) -> InstanceState:
    """`active` -> running, `pending` (and install-like words) -> creating, deletion words ->
    deleting; anything else is reported running, as in-tree (which reported no state at all)."""
    status = status.lower()
    if status in _CREATING:
        return InstanceState.CREATING
    if status in _DELETING:
        return InstanceState.DELETING
    return InstanceState.RUNNING


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return value[:63].rstrip("-._")


@dataclass(frozen=True)
class _PoolInfo:
    """What the template needs from the last listing of a pool."""

    label: str
    plan: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]


class VultrDriver(PoolDriver):
    name = "vultr"
    id_prefix = ID_PREFIX
    gpu_label = GPU_LABEL
    #: DELETE of a node lowers node_quantity (in-tree decrements its cache after it; inferred)
    remove_lowers_size = True

    def __init__(self, config: VultrConfig, client: VultrClient) -> None:
        self.config = config
        self.client = client
        self._lock = threading.Lock()
        self._groups: list[GroupConfig] = []
        self._pools: dict[str, _PoolInfo] = {}
        self._fallback_changes = 0  # incremented when what group_of reads changes
        self._plans: dict[str, dict[str, Any]] = {}
        self._region = ""
        self._unmatched: set[str] = set()  # --nodes names already warned about

    def __repr__(self) -> str:
        return f"VultrDriver(cluster={self.config.cluster_id!r}, client={self.client!r})"

    @property
    def _cluster(self) -> str:
        return self.config.cluster_id

    # ---- groups ----
    def groups(self) -> list[GroupConfig]:
        with self._lock:
            return list(self._groups)

    def _group(self, pool: Mapping[str, Any]) -> GroupConfig:
        lo, hi = pool.get("min_nodes"), pool.get("max_nodes")
        lo = lo if isinstance(lo, int) and not isinstance(lo, bool) else VKE_MIN_POOL_NODES
        hi = hi if isinstance(hi, int) and not isinstance(hi, bool) else lo
        hi = max(hi, lo)  # a pool edited to min > max: never offer CA an impossible range
        label = str(pool.get("label") or "")
        return GroupConfig(
            id=str(pool["id"]),
            min_size=lo,
            max_size=hi,
            name=label,
            debug=f"vultr pool {label} ({pool['id']}) plan {pool.get('plan')}",
        )

    @staticmethod
    def _vke_bounds(group: GroupConfig) -> GroupConfig:
        """VKE never goes below one node: a min of 0 (from the API or --nodes) counts as 1."""
        if group.min_size >= VKE_MIN_POOL_NODES:
            return group
        return replace(group, min_size=VKE_MIN_POOL_NODES, max_size=max(group.max_size, VKE_MIN_POOL_NODES))

    # ---- listing ----
    def _machines(self, pool: Mapping[str, Any], group: str) -> tuple[Machine, ...]:
        machines = []
        for node in pool.get("nodes") or []:
            if not isinstance(node, Mapping) or not node.get("id"):
                continue
            node_id = str(node["id"])
            machines.append(
                Machine(
                    id=f"{ID_PREFIX}{node_id}",
                    group=group,
                    state=node_state(str(node.get("status") or "")),
                    name=str(node.get("label") or ""),
                    handle=node_id,
                )
            )
        return tuple(machines)

    def list_pools(self) -> list[Pool]:
        """One paginated GET of the cluster's node pools; the autoscaled ones (narrowed by
        --nodes) become groups. Raises CloudError when the list call fails as a whole."""
        raw = self.client.list_node_pools(self._cluster)
        discovered: list[GroupConfig] = []
        by_id: dict[str, Mapping[str, Any]] = {}
        infos: dict[str, _PoolInfo] = {}
        for pool in raw:
            if pool.get("auto_scaler") is not True or not pool.get("id"):
                continue
            group = self._group(pool)
            discovered.append(group)
            by_id[group.id] = pool
            infos[group.id] = _PoolInfo(
                label=group.name,
                plan=str(pool.get("plan") or ""),
                labels={str(k): str(v) for k, v in (pool.get("labels") or {}).items()},
                taints=_taints(pool.get("taints")),
            )
        specs = [(s.min_size, s.max_size, s.name) for s in self.config.nodes]
        groups = [self._vke_bounds(g) for g in narrow_groups(discovered, specs)]
        self.offered = discovered
        known = {g.id for g in discovered} | {g.name for g in discovered}
        for spec in self.config.nodes:
            if spec.name not in known and spec.name not in self._unmatched:
                self._unmatched.add(spec.name)
                log.warning(
                    "vultr: --nodes names %r, which is no pool with auto_scaler on in the cluster", spec.name
                )
        with self._lock:
            if _labels(groups, infos) != _labels(self._groups, self._pools):
                self._fallback_changes += 1
            self._groups = groups
            self._pools = infos
        pools: list[Pool] = []
        for group in groups:
            entry = by_id[group.id]
            desired = entry.get("node_quantity")
            if not isinstance(desired, int) or isinstance(desired, bool):
                pools.append(
                    Pool(
                        group,
                        0,
                        listing_error=CloudError(
                            f"vultr pool {group.id}: node_quantity missing from the listing", transient=True
                        ),
                    )
                )
                continue
            pools.append(Pool(group, desired, self._machines(entry, group.id)))
        return pools

    # ---- scaling ----
    def set_size(self, group: str, size: int) -> Operation | None:
        """PATCH `node_quantity` to `size`. VKE answers with the pool; an echo that differs is a
        transient error (the machinery re-lists and pushes again; the size is absolute)."""
        if size < VKE_MIN_POOL_NODES:
            raise CloudError(
                f"vultr pool {group}: VKE pools cannot have fewer than {VKE_MIN_POOL_NODES} node",
                code="BELOW_MINIMUM",
            )
        pool = self.client.set_node_quantity(self._cluster, group, size)
        echoed = pool.get("node_quantity")
        if echoed != size:
            raise CloudError(
                f"vultr pool {group}: asked node_quantity {size}, the API echoed {echoed!r}",
                transient=True,
                code="SIZE_MISMATCH",
            )
        return None

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        """DELETE each node (VKE has no batch call); each lowers node_quantity by one. A node
        already gone counts as removed."""
        failed: dict[str, CloudError] = {}
        for machine in machines:
            node_id = machine.handle or machine.id.removeprefix(ID_PREFIX)
            try:
                self.client.delete_node(self._cluster, group, node_id)
            except MachineGone:
                continue
            except CloudError as err:
                failed[machine.id] = err
        return RemoveOutcome(failed=failed)

    # ---- node fallbacks ----
    def machine_of(self, node: NodeRef) -> str | None:
        node_id = node.labels.get(LABEL_NODE_ID, "").strip()
        return f"{ID_PREFIX}{node_id}" if node_id else None

    def fallback_version(self) -> object:
        """machine_of reads only the node; group_of reads the pool labels and the offered groups."""
        with self._lock:
            return self._fallback_changes

    def group_of(self, node: NodeRef) -> str | None:
        label = node.labels.get(LABEL_POOL, "").strip()
        if not label:
            return None
        with self._lock:
            ids = [gid for gid, info in self._pools.items() if info.label == label]
            known = {g.id for g in self._groups}
        return ids[0] if len(ids) == 1 and ids[0] in known else None

    # ---- catalogue ----
    def refresh_catalog(self) -> None:
        """Plans (paginated) and the cluster's region; the machinery calls this when its copy is
        older than `catalog_ttl`, never from a read RPC."""
        plans = {str(p["id"]): p for p in self.client.list_plans() if p.get("id")}
        region = str(self.client.get_cluster(self._cluster).get("region") or "")
        with self._lock:
            self._plans = plans
            self._region = region
            missing = sorted({i.plan for i in self._pools.values()} - set(plans))
        if missing:
            log.warning(
                "vultr: plans %s are not in the plan catalogue; their templates are unavailable", missing
            )

    def _plan(self, group: str) -> tuple[_PoolInfo, Mapping[str, Any], str] | None:
        with self._lock:
            info = self._pools.get(group)
            plan = self._plans.get(info.plan) if info else None
            region = self._region
        return (info, plan, region) if info is not None and plan is not None else None

    def template(self, group: str) -> NodeTemplate | None:
        found = self._plan(group)
        if found is None:
            return None
        info, plan, region = found
        vcpu, ram = plan.get("vcpu_count"), plan.get("ram")
        if not isinstance(vcpu, int) or vcpu <= 0 or not isinstance(ram, int) or ram <= 0:
            return None
        capacity = {"cpu": str(vcpu), "memory": f"{ram}Mi"}
        if isinstance(plan.get("disk"), int) and plan["disk"] > 0:
            capacity["ephemeral-storage"] = f"{plan['disk']}Gi"
        labels = dict(info.labels)
        labels[LABEL_POOL] = info.label
        gpu_type = str(plan.get("gpu_type") or "")
        if gpu_type:
            # one (possibly fractional, vGPU) GPU per plan: Vultr plans name a GPU type and its
            # VRAM, not a count (our assumption)
            capacity[GPU_RESOURCE] = "1"
            labels[GPU_LABEL] = _label_value(gpu_type)
        return NodeTemplate(
            capacity=capacity,
            reserved={k: v for k, v in self.config.reserved.items() if k in capacity},
            labels=labels,
            taints=info.taints,
            instance_type=info.plan,
            region=region,
            zone=region,
        )

    def hourly_price(self, group: str) -> float | None:
        found = self._plan(group)
        if found is None:
            return None
        cost = found[1].get("monthly_cost")
        return float(cost) / HOURS_PER_MONTH if isinstance(cost, int | float) and cost >= 0 else None

    def gpu_types(self) -> list[str]:
        with self._lock:
            plans = [self._plans.get(i.plan) for i in self._pools.values()]
        return sorted({_label_value(str(p["gpu_type"])) for p in plans if p and p.get("gpu_type")})

    def close(self) -> None:
        self.client.close()


def _taints(raw: Any) -> tuple[Taint, ...]:
    out = []
    for t in raw or []:
        if isinstance(t, Mapping) and t.get("key"):
            effect = str(t.get("effect") or "NoSchedule")
            out.append(
                Taint(
                    str(t["key"]),
                    str(t.get("value") or ""),
                    effect if effect in _TAINT_EFFECTS else "NoSchedule",
                )
            )
        # a taint without a key cannot be on a node; skipped
    return tuple(out)


def _labels(groups: list[GroupConfig], pools: Mapping[str, _PoolInfo]) -> tuple[object, ...]:
    """What group_of answers from: each pool's label, and which pools are offered as groups."""
    return tuple(g.id for g in groups), {gid: info.label for gid, info in pools.items()}
