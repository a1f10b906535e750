"""Exoscale SKS nodepools and standalone Instance Pools on the pool-shaped driver interface.

The cloud owns each pool's size. A Refresh discovers every group eagerly: one `list-sks-clusters`
gives the configured cluster's nodepools with their sizes and Instance Pool ids, one
`list-instance-pools` (only when standalone pools are managed) the standalone pools, and one
`list-instances` filtered by manager per pool its members with their states: never one
`get-instance` per member, and nothing at all from the read RPCs (in-tree found groups lazily through
NodeGroupForNode, #8893). The group id is the Instance Pool id, as in-tree (priority-expander configs
keep working); the nodepool name is the group's name, shown in `debug`.

`set_size` is `:scale` (absolute, safe to repeat) and `remove_machines` one `:evict` per group
(exactly those instances; Exoscale lowers the size by the number evicted). Both return as soon as
the API accepted them, with the Exoscale operation to `poll` from a background worker: nothing waits
for an operation or for the pool to be `running` again (in-tree blocked up to 10 minutes). An
operation that fails for `conflict`/`busy` (the pool was busy) is sent again from `poll`, a few
times, rather than waited out; any other `failure`/`timeout` becomes the error CA sees on the group's
placeholders, class OUT_OF_RESOURCES when it is a quota refusal.

The reading of the cloud's JSON (discovery and members) is in discovery.py, the follow-up of
operations in operations.py; this module is the driver that puts them together.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from cloudprovider_grpc.core.clock import Clock, or_wall
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.driver import (
    GroupConfig,
    Machine,
    Operation,
    OperationStatus,
    Pool,
    PoolDriver,
    RemoveOutcome,
    narrow_groups,
)
from cloudprovider_grpc.providers.exoscale.client import ExoscaleClient
from cloudprovider_grpc.providers.exoscale.config import ExoscaleConfig
from cloudprovider_grpc.providers.exoscale.discovery import (
    GONE_STATES,
    ID_PREFIX,
    GroupInfo,
    discover,
    list_members,
)
from cloudprovider_grpc.providers.exoscale.operations import OperationTracker

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
#: member listings of one Refresh in flight at once (an SKS cluster has at most 16 nodepools)
MEMBER_LISTINGS_AT_ONCE = 8


class ExoscaleDriver(PoolDriver):
    name = "exoscale"
    id_prefix = ID_PREFIX
    remove_lowers_size = True

    def __init__(self, config: ExoscaleConfig, client: ExoscaleClient, clock: Clock | None = None) -> None:
        self.config = config
        self.client = client
        self._lock = threading.Lock()
        self._groups: dict[str, GroupInfo] = {}
        self._types: dict[str, dict[str, Any]] = {}
        #: the `instance` quota limit (-1 unlimited), None until read
        self._quota: int | None = None
        self._quota_read = False
        #: the operations set_size and remove_machines started, on the backend's clock (operations.py)
        self._operations = OperationTracker(client, or_wall(clock), config.operation_retries)
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"ExoscaleDriver(zone={self.config.zone!r}, client={self.client!r})"

    # ---- groups ----
    def groups(self) -> list[GroupConfig]:
        with self._lock:
            return [g.config for g in self._groups.values()]

    def group_info(self, group: str) -> GroupInfo | None:
        with self._lock:
            return self._groups.get(group)

    def _default_max(self) -> int:
        """Max size without a --nodes spec: the `instance` quota limit, as in-tree, except that
        unlimited (-1) or unknown means no quota bound (`unbounded-max-size`)."""
        quota = self._quota
        return quota if quota is not None and quota > 0 else self.config.unbounded_max_size

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            if len(self._warned) >= 256:  # distinct cloud messages: keep the memory bounded
                self._warned.clear()
            self._warned.add(key)
            log.warning(message, *args)

    def _bounded(self, info: GroupInfo, config: GroupConfig) -> GroupConfig:
        """Standalone Instance Pools cannot be empty (the OpenAPI `instance-pool` schema makes
        `size` strictly positive; only SKS nodepools scale to zero): their min size is at least 1."""
        if info.kind != "pool" or config.min_size >= 1:
            return config
        self._warn_once(
            f"min:{config.id}",
            "exoscale: instance pool %s cannot scale to zero; its min size is 1",
            config.name,
        )
        return replace(config, min_size=1, max_size=max(1, config.max_size))

    def list_pools(self) -> list[Pool]:
        if not self._quota_read:
            self._read_quota()
        found, error = discover(self.config, self.client, self._default_max())
        specs = [(s.min_size, s.max_size, s.name) for s in self.config.specs]
        by_id = {g.config.id: g for g in found}
        kept = narrow_groups([g.config for g in found], specs)
        if error is None:
            self.offered = [g.config for g in found]
        infos = {c.id: replace(by_id[c.id], config=self._bounded(by_id[c.id], c)) for c in kept}
        named = {n for g in infos.values() for n in (g.config.id, g.config.name)}
        for spec in self.config.specs:
            if spec.name not in named and error is None:
                self._warn_once(
                    f"spec:{spec.name}",
                    "exoscale: --nodes %s names no nodepool of the SKS cluster and no standalone "
                    "instance pool in zone %s",
                    spec.name,
                    self.config.zone,
                )
        with self._lock:
            previous = dict(self._groups)
            if error is not None:
                # the part that failed keeps what it was; it comes back with listing_error below
                for gid, info in previous.items():
                    infos.setdefault(gid, info)
            self._groups = infos
        if error is not None:
            if not found and not previous:
                raise error
            self._warn_once(
                f"discovery:{error.message}",
                "exoscale: discovery incomplete, keeping the groups last seen: %s",
                error.message,
            )
        elif not infos:
            self._warn_once(
                "no-groups",
                "exoscale: no SKS nodepool and no standalone instance pool to manage in zone %s",
                self.config.zone,
            )
        self._load_types({g.instance_type for g in infos.values()} - set(self._types))
        # member listings run side by side: Refresh waits for all of them under CA's deadline
        listed = [info for gid, info in infos.items() if gid in by_id]
        with ThreadPoolExecutor(max_workers=max(1, min(MEMBER_LISTINGS_AT_ONCE, len(listed)))) as pool_exec:
            members = dict(
                zip(
                    [i.config.id for i in listed],
                    pool_exec.map(lambda info: list_members(self.client, info), listed),
                    strict=True,
                )
            )
        pools = [
            members[gid] if gid in members else Pool(info.config, 0, listing_error=error)
            for gid, info in infos.items()
        ]
        if error is not None and all(p.listing_error is not None for p in pools):
            # discovery failed and no group could be listed either (a revoked key): nothing was
            # listed, so Refresh is UNAVAILABLE rather than OK over the groups last seen
            raise error
        return pools

    # ---- changes ----
    def _send_scale(self, info: GroupInfo, size: int) -> dict[str, Any]:
        if info.kind == "sks":
            return self.client.scale_sks_nodepool(info.cluster_id, info.nodepool_id, size)
        return self.client.scale_instance_pool(info.pool_id, size)

    def _send_evict(self, info: GroupInfo, ids: Sequence[str]) -> dict[str, Any]:
        if info.kind == "sks":
            return self.client.evict_sks_nodepool_members(info.cluster_id, info.nodepool_id, ids)
        return self.client.evict_instance_pool_members(info.pool_id, ids)

    def _info(self, group: str) -> GroupInfo:
        info = self.group_info(group)
        if info is None:
            raise CloudError(f"exoscale: unknown node group {group!r}", code="NOT_FOUND")
        return info

    def set_size(self, group: str, size: int) -> Operation | None:
        info = self._info(group)
        op = self._send_scale(info, size)
        log.info("exoscale: %s -> size %d accepted (operation %s)", info.config.name, size, op.get("id"))
        return self._operations.track(group, "scale", op, lambda: self._send_scale(info, size))

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        """One `:evict` with exactly these instances. Members already gone (or being destroyed) count
        as removed, so a batch retried after an answer was lost never evicts twice."""
        info = self._info(group)
        wanted = [m.handle or m.id.removeprefix(ID_PREFIX) for m in machines]
        ids = self._still_members(info, wanted)
        if not ids:
            return RemoveOutcome()
        try:
            op = self._send_evict(info, ids)
        except CloudError as err:
            # The HTTP layer re-sends a PUT whose answer was lost; if the first one was carried out,
            # the second finds non-members (400). Evicted is evicted: nothing is lowered twice.
            if err.status != 400 or self._still_members(info, ids):
                raise
            log.info("exoscale: %s: instances %s were already evicted", info.config.name, ", ".join(ids))
            return RemoveOutcome()
        log.info(
            "exoscale: evicting %d instance(s) from %s (operation %s)",
            len(ids),
            info.config.name,
            op.get("id"),
        )
        return RemoveOutcome(
            operation=self._operations.track(group, "remove", op, lambda: self._send_evict(info, ids))
        )

    def _still_members(self, info: GroupInfo, ids: Sequence[str]) -> list[str]:
        """Those of `ids` the pool still has and is not already destroying (one list-instances)."""
        states = {
            str(i.get("id")): str(i.get("state") or "") for i in self.client.list_pool_instances(info.pool_id)
        }
        return [iid for iid in dict.fromkeys(ids) if iid in states and states[iid] not in GONE_STATES]

    def poll(self, operation: Operation) -> OperationStatus:
        return self._operations.poll(operation)

    # ---- catalogue ----
    def _read_quota(self) -> None:
        try:
            limit = self.client.get_quota("instance").get("limit")
        except CloudError as err:
            self._warn_once(
                "quota", "exoscale: cannot read the instance quota (%s); max size %d for groups without "
                "--nodes", err.message, self.config.unbounded_max_size,
            )  # fmt: skip
            return
        self._quota_read = True
        self._quota = int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None

    def _load_types(self, type_ids: set[str]) -> None:
        for tid in sorted(t for t in type_ids if t):
            try:
                self._types[tid] = self.client.get_instance_type(tid)
            except CloudError as err:
                log.warning("exoscale: instance type %s unavailable (%s); its template is unknown", tid, err)

    def refresh_catalog(self) -> None:
        """Reload the instance types in use and the quota (called when older than the catalogue TTL)."""
        self._read_quota()
        with self._lock:
            types = {g.instance_type for g in self._groups.values()}
        self._load_types(types)

    # No gpu_types: Exoscale documents no node label naming a GPU model, so GPULabel is empty (as
    # in-tree) and a GPU type list would name types CA can never find on a node. GPU nodes are still
    # recognised by their nvidia.com/gpu capacity.

    def template(self, group: str) -> NodeTemplate | None:
        info = self.group_info(group)
        itype = self._types.get(info.instance_type) if info else None
        if info is None or itype is None:
            return None
        cpus, memory = itype.get("cpus"), itype.get("memory")
        if not isinstance(cpus, int) or not isinstance(memory, int) or cpus <= 0 or memory <= 0:
            return None
        capacity = {"cpu": str(cpus), "memory": str(memory)}
        gpus = itype.get("gpus")
        if isinstance(gpus, int) and gpus > 0:
            capacity[GPU_RESOURCE] = str(gpus)
        if info.disk_size > 0:
            capacity["ephemeral-storage"] = f"{info.disk_size}Gi"
        reserved = {k: v for k, v in self.config.reserved.items() if k in capacity}
        return NodeTemplate(
            capacity=capacity,
            reserved=reserved,
            labels=dict(info.labels or {}),
            taints=info.taints,
            # the CCM's instance-type label is <family>.<size>, zone and region the zone name
            # (exoscale-cloud-controller-manager instances_v2.go)
            instance_type=f"{itype.get('family')}.{itype.get('size')}",
            region=self.config.zone,
            zone=self.config.zone,
        )

    def close(self) -> None:
        self.client.close()
