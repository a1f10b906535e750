"""Cherry Servers mapped onto the `Driver` interface.

Cherry has no node pools: a pool is the set of servers tagged `k8s-cluster=<cluster>` and
`k8s-nodepool=<pool>` (in-tree membership rule). Our creation token rides along as a third tag,
`k8s-create-token=<token>`, so a create whose answer was lost can be recognised on the next list.
One paginated list per project serves a whole Refresh; the plan catalogue (capacity, GPUs, hourly
price) is cached and reloaded only when `catalog_ttl` has passed.
"""

from __future__ import annotations

import base64
import logging
import random
import re
import threading
from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.cherry.client import CherryClient
from cloudprovider_grpc.providers.cherry.config import CherryConfig, PoolSpec
from cloudprovider_grpc.providers.contract import ErrorClass, InstanceError, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import (
    CloudError,
    GroupConfig,
    Machine,
    MachineDriver,
    MachineGone,
    MachineListing,
)

log = logging.getLogger(__name__)

TAG_CLUSTER = "k8s-cluster"
TAG_POOL = "k8s-nodepool"
TAG_TOKEN = "k8s-create-token"
ID_PREFIX = "cherryservers://"
GPU_LABEL = "cherryservers.com/gpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: in-tree RandString8 alphabet (cherry_manager_rest.go): lowercase letters without "b"
RAND_LETTERS = "acdefghijklmnopqrstuvwxyz"
#: in-tree memory unit multipliers (powers of two), as Kubernetes binary suffixes
_MEMORY_SUFFIX = {"KB": "Ki", "MB": "Mi", "GB": "Gi", "TB": "Ti"}
#: statuses of a server that is still being installed (cherrygo, SDK docs: deploying -> deployed)
_CREATING_STATUSES = frozenset({"deploying", "pending", "provisioning", "allocated", "reinstalling"})
_FAILED_STATUSES = frozenset({"failed deployment", "failed", "deployment failed"})
_DELETING = frozenset({"terminating", "terminated", "deleting", "deleted"})


def server_state(server: Mapping[str, Any]) -> tuple[InstanceState, InstanceError | None]:
    """What CA should see for a server, from its `status` (deploy progress) and `state` (lifecycle)."""
    status = str(server.get("status") or "").lower()
    state = str(server.get("state") or "").lower()
    if state in _DELETING or status in _DELETING:
        return InstanceState.DELETING, None
    if status in _FAILED_STATUSES:
        return InstanceState.CREATING, InstanceError(
            code="DEPLOYMENT_FAILED",
            message=f"cherry server {server.get('id')} deployment failed (status {status!r})",
            error_class=ErrorClass.OTHER,
        )
    if status in _CREATING_STATUSES:
        return InstanceState.CREATING, None
    return InstanceState.RUNNING, None


def _tags(server: Mapping[str, Any]) -> dict[str, str]:
    tags = server.get("tags") or {}
    if isinstance(tags, Mapping):
        return {str(k): str(v) for k, v in tags.items()}
    if isinstance(tags, list):  # tolerate "k=v" lists
        return dict(str(t).split("=", 1) for t in tags if "=" in str(t))
    return {}


def _label_value(text: str) -> str:
    """A Kubernetes label value from free text ("NVIDIA A2" -> "nvidia-a2")."""
    value = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return value[:63].rstrip("-._")


def plan_memory(plan: Mapping[str, Any]) -> str | None:
    memory = (plan.get("specs") or {}).get("memory") or {}
    total = memory.get("total")
    if not isinstance(total, int | float) or total <= 0:
        return None
    suffix = _MEMORY_SUFFIX.get(str(memory.get("unit") or "").upper())
    # An unknown unit counts as bytes, as in-tree does.
    return f"{int(total)}{suffix}" if suffix else str(int(total))


def pool_gpus(pool: PoolSpec) -> tuple[int, str]:
    """(count, type) of a pool's GPUs, as configured (`gpu-count`, `gpu-type`). Not read from the plan:
    the API's plan specs have no GPU entry that a template could rely on."""
    if pool.gpu_count <= 0:
        return 0, ""
    return pool.gpu_count, _label_value(pool.gpu_type or pool.plan) or "gpu"


def plan_hourly_price(plan: Mapping[str, Any]) -> float | None:
    for entry in plan.get("pricing") or []:
        if str(entry.get("unit") or "").lower() == "hourly" and isinstance(entry.get("price"), int | float):
            return float(entry["price"])
    return None


class CherryDriver(MachineDriver):
    name = "cherry"
    id_prefix = ID_PREFIX
    gpu_label = GPU_LABEL

    def __init__(
        self,
        config: CherryConfig,
        client: CherryClient,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self._rng = rng or random.SystemRandom()
        self._lock = threading.Lock()
        self._plans: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"CherryDriver(pools={sorted(self.config.pools)}, client={self.client!r})"

    # ---- groups and membership ----
    def groups(self) -> list[GroupConfig]:
        return list(self.config.groups)

    def is_control_plane(self, node: NodeRef) -> bool:
        return self.config.controller_label in node.labels or super().is_control_plane(node)

    def fallback_version(self) -> object:
        return None  # is_control_plane reads the node and the fixed configuration only

    def _machine(self, server: Mapping[str, Any], group: str) -> Machine:
        state, error = server_state(server)
        return Machine(
            id=f"{ID_PREFIX}{server['id']}",
            group=group,
            state=state,
            name=str(server.get("hostname") or ""),
            token=_tags(server).get(TAG_TOKEN, ""),
            error=error,
        )

    def list_machines(self) -> MachineListing:
        """One paginated listing per project. A project that fails (403 on a wrong project-id, say)
        fails only its own pools; nothing listed at all raises."""
        machines: list[Machine] = []
        failed: dict[str, CloudError] = {}
        errors: list[CloudError] = []
        for project_id in self.config.project_ids:
            try:
                servers = self.client.list_servers(project_id)
            except CloudError as exc:
                errors.append(exc)
                for pool in self.config.pools.values():
                    if pool.project_id == project_id:
                        failed[pool.name] = exc
                continue
            for server in servers:
                tags = _tags(server)
                member = self.config.pools.get(tags.get(TAG_POOL, ""))
                if (
                    member is None
                    or member.project_id != project_id
                    or tags.get(TAG_CLUSTER) != member.cluster_name
                ):
                    continue
                if "id" not in server:
                    continue
                machines.append(self._machine(server, member.name))
        if errors and len(errors) == len(self.config.project_ids):
            raise errors[0]
        # servers sharing a creation token are deduplicated by MachineProvider
        return MachineListing(machines, failed)

    # ---- create / delete ----
    def _rand8(self) -> str:
        return "".join(self._rng.choice(RAND_LETTERS) for _ in range(8))

    def create_request(self, pool: PoolSpec, token: str) -> dict[str, Any]:
        """The POST body, shaped as in-tree's CreateServer (cherry_types.go) plus the token tag."""
        hostname = ""
        if pool.hostname_pattern is not None:
            hostname = pool.hostname_pattern.render(
                {"ClusterName": pool.cluster_name, "NodeGroup": pool.name, "RandString8": self._rand8()}
            )
        user_data = ""
        if pool.cloudinit is not None:
            rendered = pool.cloudinit.render(
                {
                    "BootstrapTokenID": self.config.bootstrap_token_id,
                    "BootstrapTokenSecret": self.config.bootstrap_token_secret,
                    "APIServerEndpoint": pool.api_server_endpoint,
                    "NodeGroup": pool.name,
                }
            )
            user_data = base64.b64encode(rendered.encode()).decode()
        tags = {TAG_CLUSTER: pool.cluster_name, TAG_POOL: pool.name}
        if token:
            tags[TAG_TOKEN] = token
        body: dict[str, Any] = {
            "project_id": pool.project_id,
            "plan": pool.plan,
            "image": pool.os,
            "region": pool.region,
            "ssh_keys": list(pool.ssh_key_ids) or None,
            "ip_addresses": None,
            "tags": tags,
        }
        if hostname:
            body["hostname"] = hostname
        if user_data:
            body["user_data"] = user_data
        if pool.os_partition_size:
            body["os_partition_size"] = pool.os_partition_size
        return body

    def create_machine(self, group: str, token: str) -> Machine:
        pool = self.config.pools[group]
        server = self.client.create_server(pool.project_id, self.create_request(pool, token))
        if not isinstance(server, Mapping) or "id" not in server:
            # Probably created, but the answer does not say which server: transient, so the managed
            # layer looks the token up in the next listing instead of creating again.
            raise CloudError("cherry create_server: the answer carries no server id", transient=True)
        return self._machine(server, group)

    def delete_machine(self, machine: Machine) -> None:
        server_id = machine.id.removeprefix(ID_PREFIX)
        if not server_id.isdigit():
            raise MachineGone(f"{machine.id!r} is not a Cherry server id")
        self.client.delete_server(server_id)

    # ---- catalogue ----
    def refresh_catalog(self) -> None:
        """Reload the plan catalogue (one GET /plans); the managed layer calls this when its copy is
        older than `catalog_ttl`, never from a read RPC."""
        plans = self.client.list_plans()
        index: dict[str, dict[str, Any]] = {}
        for plan in plans:
            if not isinstance(plan, Mapping):
                continue
            if plan.get("slug"):
                index[str(plan["slug"])] = dict(plan)
            if plan.get("id") is not None:
                index.setdefault(str(plan["id"]), dict(plan))
        with self._lock:
            self._plans = index
        missing = sorted({p.plan for p in self.config.pools.values()} - set(index))
        if missing:
            log.warning(
                "cherry: plans %s are not in the plan catalogue; their templates are unavailable", missing
            )

    def _plan(self, group: str) -> tuple[PoolSpec, dict[str, Any]] | None:
        pool = self.config.pools.get(group)
        if pool is None:
            return None
        with self._lock:
            plan = self._plans.get(pool.plan)
        return (pool, plan) if plan is not None else None

    def _region_slug(self, pool: PoolSpec, plan: Mapping[str, Any]) -> str:
        """The region's slug (what the CCM labels nodes with), also when the config names it ("EU-Nord-1")."""
        for region in plan.get("available_regions") or []:
            names = {str(region.get("slug") or "").lower(), str(region.get("name") or "").lower()}
            if pool.region.lower() in names and region.get("slug"):
                return str(region["slug"])
        return pool.region

    def template(self, group: str) -> NodeTemplate | None:
        found = self._plan(group)
        if found is None:
            return None
        pool, plan = found
        cores = ((plan.get("specs") or {}).get("cpus") or {}).get("cores")
        memory = plan_memory(plan)
        if not isinstance(cores, int) or cores <= 0 or memory is None:
            return None
        capacity = {"cpu": str(cores), "memory": memory}
        labels = {"pool": group}
        gpu_count, gpu_type = pool_gpus(pool)
        if gpu_count:
            capacity[GPU_RESOURCE] = str(gpu_count)
            labels[GPU_LABEL] = gpu_type
        reserved = {k: v for k, v in self.config.reserved.items() if k in capacity}
        return NodeTemplate(
            capacity=capacity,
            reserved=reserved,
            labels=labels,
            instance_type=str(plan.get("slug") or pool.plan),
            region=self._region_slug(pool, plan),
        )

    def hourly_price(self, group: str) -> float | None:
        found = self._plan(group)
        return plan_hourly_price(found[1]) if found else None

    def gpu_types(self) -> list[str]:
        return sorted({t for n, t in map(pool_gpus, self.config.pools.values()) if n})

    def close(self) -> None:
        self.client.close()
