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
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from cloudprovider_grpc.core.clock import Clock, or_wall
from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError
from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import (
    GroupConfig,
    Machine,
    Operation,
    OperationState,
    OperationStatus,
    Pool,
    PoolDriver,
    RemoveOutcome,
    narrow_groups,
)
from cloudprovider_grpc.providers.exoscale.client import _QUOTA_RE, ExoscaleClient
from cloudprovider_grpc.providers.exoscale.config import ExoscaleConfig

_CAPACITY_RE = re.compile(r"capacity|insufficient|sold.?out|no (?:more )?(?:hosts|resources)", re.I)

log = logging.getLogger(__name__)

#: providerID as the Exoscale CCM sets it (exoscale-cloud-controller-manager; in-tree strips it)
ID_PREFIX = "exoscale://"
GPU_RESOURCE = "nvidia.com/gpu"
#: operations still tracked after this long are dropped (pool_operations.py stops polling after 30 minutes)
FORGET_OPERATIONS_AFTER = 3600.0
#: member listings of one Refresh in flight at once (an SKS cluster has at most 16 nodepools)
MEMBER_LISTINGS_AT_ONCE = 8
#: instance states (OpenAPI `instance-state`) -> what CA sees
_STATES: Mapping[str, InstanceState] = {
    "starting": InstanceState.CREATING,
    "running": InstanceState.RUNNING,
    # a stopped or migrating instance still exists and is still the node; CA's unready-node
    # handling covers it (in-tree reported both as errors, which makes CA delete the node)
    "stopped": InstanceState.RUNNING,
    "migrating": InstanceState.RUNNING,
    "stopping": InstanceState.DELETING,
    "destroying": InstanceState.DELETING,
    "expunging": InstanceState.DELETING,
    "destroyed": InstanceState.DELETING,
}
_GONE = frozenset({"destroying", "expunging", "destroyed"})
#: operation failure reasons that mean "the pool was busy": the same request is sent again
_RETRY_REASONS = frozenset({"conflict", "busy"})


@dataclass(frozen=True)
class GroupInfo:
    """What the last listing knew of one group, for set_size/remove_machines/template."""

    config: GroupConfig
    pool_id: str
    instance_type: str
    kind: str  # "sks" or "pool"
    cluster_id: str = ""
    nodepool_id: str = ""
    labels: Mapping[str, str] | None = None
    taints: tuple[Taint, ...] = ()
    disk_size: int = 0
    #: the cloud's desired size as listed (nodepool or pool `size`)
    size: int = 0


@dataclass
class _Tracked:
    """An operation we follow: the request to send again if the pool was busy."""

    group: str
    kind: str
    exo_id: str
    resend: Callable[[], dict[str, Any]]
    attempts: int = 0
    created: float = 0.0


def instance_state(instance: Mapping[str, Any]) -> tuple[InstanceState, InstanceError | None]:
    state = str(instance.get("state") or "")
    if state == "error":
        return InstanceState.CREATING, InstanceError(
            code="exoscale-instance-error",
            message=f"exoscale instance {instance.get('id')} is in state error",
            error_class=ErrorClass.OTHER,
        )
    return _STATES.get(state, InstanceState.CREATING if not state else InstanceState.RUNNING), None


def _taints(raw: Any) -> tuple[Taint, ...]:
    """Nodepool taints: {key: {value, effect}} (OpenAPI `sks-nodepool-taints`)."""
    if not isinstance(raw, Mapping):
        return ()
    out = []
    for key, spec in sorted(raw.items()):
        if isinstance(spec, Mapping):
            out.append(Taint(str(key), str(spec.get("value") or ""), str(spec.get("effect") or "NoSchedule")))
    return tuple(out)


def _count(obj: Mapping[str, Any], key: str) -> int:
    """A non-negative integer field; anything else (absent, null, a string) counts as 0."""
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _ref(obj: Any, key: str) -> str:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return str(value.get("id") or "") if isinstance(value, Mapping) else ""


class ExoscaleDriver(PoolDriver):
    name = "exoscale"
    id_prefix = ID_PREFIX
    remove_lowers_size = True

    def __init__(self, config: ExoscaleConfig, client: ExoscaleClient, clock: Clock | None = None) -> None:
        self.config = config
        self._clock = or_wall(clock)  # operations are tracked on the backend's clock
        self.client = client
        self._lock = threading.Lock()
        self._groups: dict[str, GroupInfo] = {}
        self._types: dict[str, dict[str, Any]] = {}
        #: the `instance` quota limit (-1 unlimited), None until read
        self._quota: int | None = None
        self._quota_read = False
        self._ops: dict[str, _Tracked] = {}
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

    def _cluster(self, clusters: list[dict[str, Any]]) -> dict[str, Any] | None:
        want = self.config.sks_cluster
        if want:
            found = [c for c in clusters if want in (c.get("id"), c.get("name"))]
            if not found:
                raise CloudError(
                    f"exoscale: no SKS cluster {want!r} in zone {self.config.zone}", code="NOT_FOUND"
                )
            if len(found) > 1:
                raise CloudError(f"exoscale: several SKS clusters are named {want!r}; give its id")
            return found[0]
        if len(clusters) == 1:
            return clusters[0]
        if clusters:
            raise CloudError(
                f"exoscale: zone {self.config.zone} has {len(clusters)} SKS clusters; "
                "set EXOSCALE_SKS_CLUSTER to the one to autoscale"
            )
        return None

    def _discover(self) -> tuple[list[GroupInfo], CloudError | None]:
        """Every candidate group (before --nodes narrowing), and the error of a part that failed."""
        found: list[GroupInfo] = []
        error: CloudError | None = None
        nodepool_names: set[str] = set()
        try:
            cluster = self._cluster(self.client.list_sks_clusters())
        except CloudError as err:
            cluster, error = None, err
        if cluster is not None:
            for np in cluster.get("nodepools") or []:
                pool_id = _ref(np, "instance-pool")
                if not pool_id or not np.get("name"):
                    continue
                name = str(np["name"])
                nodepool_names.add(name)
                labels = np.get("labels") if isinstance(np.get("labels"), Mapping) else {}
                found.append(
                    GroupInfo(
                        config=GroupConfig(
                            id=pool_id,
                            name=name,
                            min_size=1,
                            max_size=self._default_max(),
                            debug=f"exoscale SKS nodepool {name} (cluster {cluster.get('name')}, "
                            f"instance pool {pool_id})",
                        ),
                        pool_id=pool_id,
                        instance_type=_ref(np, "instance-type"),
                        kind="sks",
                        cluster_id=str(cluster.get("id") or ""),
                        nodepool_id=str(np.get("id") or ""),
                        labels={str(k): str(v) for k, v in (labels or {}).items()},
                        taints=_taints(np.get("taints")),
                        disk_size=_count(np, "disk-size"),
                        size=_count(np, "size"),
                    )
                )
        wanted = set(self.config.instance_pools)
        if not wanted and error is None:
            # --nodes names no nodepool matched are standalone pools (the in-tree rule)
            wanted = {n for n in self.config.spec_names if n not in nodepool_names}
        if wanted:
            try:
                pools = self.client.list_instance_pools()
            except CloudError as err:
                pools, error = [], error or err
            for pool in pools:
                manager = pool.get("manager")
                if isinstance(manager, Mapping) and manager.get("type") == "sks-nodepool":
                    continue  # a nodepool's pool: managed through its nodepool
                pid, name = str(pool.get("id") or ""), str(pool.get("name") or "")
                if not pid or not ("*" in wanted or pid in wanted or name in wanted):
                    continue
                found.append(
                    GroupInfo(
                        config=GroupConfig(
                            id=pid,
                            name=name,
                            min_size=1,
                            max_size=self._default_max(),
                            debug=f"exoscale instance pool {name} ({pid})",
                        ),
                        pool_id=pid,
                        instance_type=_ref(pool, "instance-type"),
                        kind="pool",
                        disk_size=_count(pool, "disk-size"),
                        size=_count(pool, "size"),
                    )
                )
        return found, error

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
        found, error = self._discover()
        specs = [(s.min_size, s.max_size, s.name) for s in self.config.specs]
        by_id = {g.config.id: g for g in found}
        kept = narrow_groups([g.config for g in found], specs)
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
                zip([i.config.id for i in listed], pool_exec.map(self._list_members, listed), strict=True)
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

    def _list_members(self, info: GroupInfo) -> Pool:
        try:
            instances = self.client.list_pool_instances(info.pool_id)
        except CloudError as err:
            return Pool(info.config, 0, listing_error=err)
        machines = []
        for inst in instances:
            iid = str(inst.get("id") or "")
            if not iid:
                continue
            state, error = instance_state(inst)
            machines.append(
                Machine(
                    id=f"{ID_PREFIX}{iid}",
                    group=info.config.id,
                    state=state,
                    name=str(inst.get("name") or ""),
                    error=error,
                    handle=iid,
                )
            )
        return Pool(info.config, info.size, machines=tuple(machines))

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

    def _track(
        self, group: str, kind: str, op: dict[str, Any], resend: Callable[[], dict[str, Any]]
    ) -> Operation | None:
        state = op.get("state")
        if state == "success":
            return None
        if state in ("failure", "timeout"):
            err = self._failure_error(group, kind, op)
            err.transient = op.get("reason") in _RETRY_REASONS  # a busy pool: the machinery retries later
            raise err
        ref = str(op["id"])
        with self._lock:
            now = self._clock.monotonic()
            # operations nobody polls any more (the machinery gives up on very old ones) are forgotten
            for old in [r for r, t in self._ops.items() if now - t.created > FORGET_OPERATIONS_AFTER]:
                del self._ops[old]
            self._ops[ref] = _Tracked(group, kind, ref, resend, created=now)
        return Operation(group=group, kind=kind, ref=ref)

    def set_size(self, group: str, size: int) -> Operation | None:
        info = self._info(group)
        op = self._send_scale(info, size)
        log.info("exoscale: %s -> size %d accepted (operation %s)", info.config.name, size, op.get("id"))
        return self._track(group, "scale", op, lambda: self._send_scale(info, size))

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
        return RemoveOutcome(operation=self._track(group, "remove", op, lambda: self._send_evict(info, ids)))

    def _still_members(self, info: GroupInfo, ids: Sequence[str]) -> list[str]:
        """Those of `ids` the pool still has and is not already destroying (one list-instances)."""
        states = {
            str(i.get("id")): str(i.get("state") or "") for i in self.client.list_pool_instances(info.pool_id)
        }
        return [iid for iid in dict.fromkeys(ids) if iid in states and states[iid] not in _GONE]

    def _failure_error(self, group: str, kind: str, op: Mapping[str, Any]) -> CloudError:
        state, reason = op.get("state"), op.get("reason") or "unknown"
        detail = f": {op['message']}" if op.get("message") else ""
        message = f"exoscale {kind} of group {group}: operation {op.get('id')} {state} ({reason}){detail}"
        text = str(op.get("message") or "")
        # out of resources, which CA backs off from as such (class 1): an account quota answers
        # `forbidden` with a quota message, a zone short of an instance type `unavailable` with a
        # capacity message (Exoscale calls such offerings "capacity-constrained")
        quota = reason == "forbidden" and _QUOTA_RE.search(text)
        capacity = reason == "unavailable" and _CAPACITY_RE.search(text)
        return CloudError(
            message,
            error_class=ErrorClass.OUT_OF_RESOURCES if quota or capacity else ErrorClass.OTHER,
            code="QUOTA_EXCEEDED"
            if quota
            else "OUT_OF_CAPACITY"
            if capacity
            else f"exoscale-operation-{state}-{reason}",
        )

    def poll(self, operation: Operation) -> OperationStatus:
        with self._lock:
            tracked = self._ops.get(operation.ref)
        if tracked is None:
            return OperationStatus(OperationState.SUCCEEDED)
        try:
            op = self.client.get_operation(tracked.exo_id)
        except CloudError as err:
            if err.status == 404:
                self._forget(operation.ref)
                return OperationStatus(
                    OperationState.FAILED,
                    InstanceError(
                        "exoscale-operation-unknown", f"exoscale operation {tracked.exo_id} not found"
                    ),
                )
            raise
        state = op.get("state")
        if state == "pending":
            return OperationStatus(OperationState.PENDING)
        if state == "success":
            self._forget(operation.ref)
            return OperationStatus(OperationState.SUCCEEDED)
        if op.get("reason") in _RETRY_REASONS and tracked.attempts < self.config.operation_retries:
            tracked.attempts += 1
            log.info(
                "exoscale: %s of %s found the pool busy (%s); sending it again (%d of %d)",
                tracked.kind, tracked.group, op.get("reason"),
                tracked.attempts, self.config.operation_retries,
            )  # fmt: skip
            again = tracked.resend()
            if again.get("state") == "success":
                self._forget(operation.ref)
                return OperationStatus(OperationState.SUCCEEDED)
            tracked.exo_id = str(again["id"])
            return OperationStatus(OperationState.PENDING)
        self._forget(operation.ref)
        failure = self._failure_error(tracked.group, tracked.kind, op)
        log.warning("%s", failure.message)
        return OperationStatus(OperationState.FAILED, failure.as_instance_error())

    def _forget(self, ref: str) -> None:
        with self._lock:
            self._ops.pop(ref, None)

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
