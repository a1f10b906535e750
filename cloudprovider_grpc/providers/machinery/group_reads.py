"""The read side of the shared machinery: every read RPC, answered from memory.

CA calls serially with a 5 s deadline, so nothing here does cloud I/O: NodeGroups, NodeGroupForNode
(by providerID, by name for nodes CA sends without one, then the driver's label fallbacks
`machine_of` and `group_of`; control-plane nodes never belong), TargetSize, templates (cached per
group until the catalogue is reloaded, so the service's encoded template is reused), options, GPU
facts and prices all come from the group states and the driver's catalogue. `ReadSide` is handed
the group core and reads its groups, node index and templates under the core's lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Generic

from cloudprovider_grpc.core.errors import NotImplementedByProvider
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.contract import AutoscalingOptions, GroupSizes, NodeGroup, NodeRef
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import S

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
TEMPLATE_NAME_PREFIX = "template-node-for-"


class ReadSide(Generic[S]):
    """The read RPCs of `GroupProvider`: memory only, from the group core it is handed."""

    def __init__(self, core: GroupCore[S]) -> None:
        self._core = core

    def node_groups(self) -> Sequence[NodeGroup]:
        return self._core.node_groups  # the same object while unchanged: the service caches its answer

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        if self._core.driver.is_control_plane(node):
            return None
        with self._core.lock:
            gid = self._core.index.by_id.get(node.provider_id) if node.provider_id else None
            if gid is None and not node.provider_id and node.name:
                gid = self._core.index.by_name.get(node.name)
            if gid is None:
                mid = self._core.driver.machine_of(node)
                gid = self._core.index.by_id.get(mid) if mid else None
            if gid is None:
                gid = self._core.driver.group_of(node)
            return self._core.group_objs.get(gid) if gid is not None else None

    def target_size(self, group_id: str) -> int:
        with self._core.lock:
            return self._core.target(self._core.group(group_id))

    def template(self, group_id: str) -> NodeTemplate:
        with self._core.lock:
            self._core.group(group_id)
            if group_id in self._core.templates:
                tpl = self._core.templates[group_id]
            else:
                tpl = self._core.templates[group_id] = self._core.driver.template(group_id)
        if tpl is None:
            raise NotImplementedByProvider(
                f"{self._core.name}: no template is known for node group {group_id!r}"
            )
        return tpl

    def options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        with self._core.lock:
            cfg = self._core.group(group_id).config
        return defaults.merged(cfg.options) if cfg.options else None

    def gpu_label(self) -> str:
        return self._core.driver.gpu_label

    def gpu_types(self) -> list[str]:
        return list(self._core.driver.gpu_types())

    def node_price(self, node: NodeRef, start: datetime, end: datetime) -> float:
        gid = self._group_for_pricing(node)
        price = self._core.driver.hourly_price(gid) if gid else None
        if price is None:
            raise NotImplementedByProvider(
                f"{self._core.name}: no price is known for node {node.name or node.provider_id!r}"
            )
        return price * _hours(start, end)

    def pod_price(self, requests: Mapping[str, float], start: datetime, end: datetime) -> float:
        """The cheapest share of a node the pod would occupy: for each priced group whose template
        fits the pod, hourly price x the pod's dominant share (max of its cpu, memory and GPU
        fractions of the node's allocatable); the minimum over groups, or over all priced groups
        when it fits none. This mirrors how CA's price expander compares node cost with the value of
        the pods it schedules (cluster-autoscaler expander/price/price.go)."""
        best_fit: float | None = None
        best_any: float | None = None
        for gid in list(self._core.groups):
            price = self._core.driver.hourly_price(gid)
            tpl = self._core.driver.template(gid)
            if price is None or tpl is None:
                continue
            share, fits = _dominant_share(requests, tpl)
            cost = price * share
            best_any = cost if best_any is None else min(best_any, cost)
            if fits:
                best_fit = cost if best_fit is None else min(best_fit, cost)
        best = best_fit if best_fit is not None else best_any
        if best is None:
            raise NotImplementedByProvider(f"{self._core.name}: no node group has a price")
        return best * _hours(start, end)

    def sizes(self) -> dict[str, GroupSizes]:
        with self._core.lock:
            return {
                gid: GroupSizes(self._core.target(s), len(s.live_machines()))
                for gid, s in self._core.groups.items()
            }

    def _group_for_pricing(self, node: NodeRef) -> str | None:
        if node.provider_id:
            with self._core.lock:
                gid = self._core.index.by_id.get(node.provider_id)
            if gid:
                return gid
        itype = node.labels.get(INSTANCE_TYPE_LABEL)
        if itype:
            for gid in list(self._core.groups):
                tpl = self._core.driver.template(gid)
                if tpl is not None and tpl.instance_type == itype:
                    return gid
        if node.name.startswith(TEMPLATE_NAME_PREFIX):
            rest = node.name[len(TEMPLATE_NAME_PREFIX) :]
            # CA names sanitized templates template-node-for-<group>-<random suffix>
            for gid in sorted(self._core.groups, key=len, reverse=True):
                if rest == gid or rest.startswith(gid + "-"):
                    return gid
        return None


def _hours(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600.0)


def _dominant_share(requests: Mapping[str, float], tpl: NodeTemplate) -> tuple[float, bool]:
    """(largest fraction of the template's allocatable the requests take, whether they fit)."""
    from cloudprovider_grpc.k8s.quantity import parse_quantity

    share, fits = 0.0, True
    for resource, amount in requests.items():
        if amount <= 0:
            continue
        cap = tpl.capacity.get(resource)
        if cap is None:
            if resource in ("cpu", "memory"):
                fits = False
            continue
        total = float(parse_quantity(cap))
        reserved = tpl.reserved.get(resource)
        if reserved:
            total -= float(parse_quantity(reserved))
        if total <= 0:
            fits = False
            continue
        frac = amount / total
        fits = fits and frac <= 1.0
        share = max(share, frac)
    return share, fits
