"""What the Exoscale driver reads of the cloud: the groups a listing discovers (the configured SKS
cluster's nodepools and the standalone Instance Pools `--nodes` names) and each pool's members with
their states as CA sees them. Plain functions over the client's JSON, kept apart from the driver's
changes (driver.py) and its operation follow-up (operations.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError
from cloudprovider_grpc.k8s.template import Taint
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import GroupConfig, Machine, Pool
from cloudprovider_grpc.providers.exoscale.client import ExoscaleClient
from cloudprovider_grpc.providers.exoscale.config import ExoscaleConfig

#: providerID as the Exoscale CCM sets it (exoscale-cloud-controller-manager; in-tree strips it)
ID_PREFIX = "exoscale://"

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
GONE_STATES = frozenset({"destroying", "expunging", "destroyed"})


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


def pick_cluster(config: ExoscaleConfig, clusters: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The SKS cluster to autoscale: the one configured by id or name, else the zone's only one."""
    want = config.sks_cluster
    if want:
        found = [c for c in clusters if want in (c.get("id"), c.get("name"))]
        if not found:
            raise CloudError(f"exoscale: no SKS cluster {want!r} in zone {config.zone}", code="NOT_FOUND")
        if len(found) > 1:
            raise CloudError(f"exoscale: several SKS clusters are named {want!r}; give its id")
        return found[0]
    if len(clusters) == 1:
        return clusters[0]
    if clusters:
        raise CloudError(
            f"exoscale: zone {config.zone} has {len(clusters)} SKS clusters; "
            "set EXOSCALE_SKS_CLUSTER to the one to autoscale"
        )
    return None


def discover(
    config: ExoscaleConfig, client: ExoscaleClient, default_max: int
) -> tuple[list[GroupInfo], CloudError | None]:
    """Every candidate group (before --nodes narrowing), and the error of a part that failed;
    `default_max` is the max size of a group no --nodes spec bounds."""
    found: list[GroupInfo] = []
    error: CloudError | None = None
    nodepool_names: set[str] = set()
    try:
        cluster = pick_cluster(config, client.list_sks_clusters())
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
                        max_size=default_max,
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
    wanted = set(config.instance_pools)
    if not wanted and error is None:
        # --nodes names no nodepool matched are standalone pools (the in-tree rule)
        wanted = {n for n in config.spec_names if n not in nodepool_names}
    if wanted:
        try:
            pools = client.list_instance_pools()
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
                        max_size=default_max,
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


def list_members(client: ExoscaleClient, info: GroupInfo) -> Pool:
    """One group's members with their states (one `list-instances` filtered by its pool)."""
    try:
        instances = client.list_pool_instances(info.pool_id)
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
